"""Incremental detokenization with stop strings, for streaming.

Decoding token by token breaks multi-byte characters and merges (a byte-level BPE token
may be half a UTF-8 character), so each step decodes a short window of recent tokens and
emits only the text that is new and complete. Text that could be the start of a stop
string is held back until it is known not to be one, so a stop string never leaks into
the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Decode = Callable[[list[int]], str]


@dataclass(slots=True)
class IncrementalDetokenizer:
    decode: Decode
    stop: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    prefix_offset: int = 0
    read_offset: int = 0
    text: str = ""  # all complete text so far (before stop truncation)
    emitted: int = 0  # characters of `text` already handed out

    def add(self, token_ids: list[int]) -> None:
        self.tokens.extend(token_ids)
        prefix_text = self.decode(self.tokens[self.prefix_offset : self.read_offset])
        new_text = self.decode(self.tokens[self.prefix_offset :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self.text += new_text[len(prefix_text) :]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.tokens)

    def find_stop(self) -> int:
        """Index in `text` where the earliest stop string starts, or -1."""
        if not self.stop:
            return -1
        hits = [i for i in (self.text.find(s, max(0, self.emitted - len(s))) for s in self.stop) if i >= 0]
        return min(hits) if hits else -1

    def take(self, final: bool, cut: int = -1) -> str:
        """Text not yet handed out. Holds back a possible stop-string prefix unless final."""
        end = len(self.text) if cut < 0 else cut
        if not final and cut < 0 and self.stop:
            end -= self._possible_stop_prefix()
        end = max(end, self.emitted)
        out = self.text[self.emitted : end]
        self.emitted = end
        return out

    def _possible_stop_prefix(self) -> int:
        longest = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:k]):
                    longest = max(longest, k)
                    break
        return longest

    def final_text(self, cut: int = -1) -> str:
        return self.text if cut < 0 else self.text[:cut]


@dataclass(slots=True)
class StreamDetokenizer(IncrementalDetokenizer):
    """The same, with the `tokenizers` library's own incremental decoder (`DecodeStream`, as
    vLLM's fast detokenizer uses): one Rust call per token instead of two window decodes,
    several times cheaper, which is what the API server pays per token per stream. `tokens`
    and the window offsets are not kept."""

    backend: Any = None  # a tokenizers.Tokenizer
    stream: Any = None  # its DecodeStream

    def add(self, token_ids: list[int]) -> None:
        for token in token_ids:
            piece = self.stream.step(self.backend, token)
            if piece:
                self.text += piece


def detokenizer_factory(tokenizer: Any) -> Callable[[Sequence[str]], IncrementalDetokenizer]:
    """stop strings -> a new detokenizer for one sequence of `tokenizer`'s: the streaming one
    where its backend is a `tokenizers.Tokenizer`, else the window decoder over `decode`."""
    backend = getattr(tokenizer, "backend", None)
    try:
        import tokenizers
        from tokenizers.decoders import DecodeStream
    except ImportError:  # a tokenizers release without DecodeStream (< 0.21)
        backend = None
    if backend is None or not isinstance(backend, tokenizers.Tokenizer):
        return lambda stop: IncrementalDetokenizer(tokenizer.decode, list(stop))
    return lambda stop: StreamDetokenizer(
        tokenizer.decode, list(stop), backend=backend, stream=DecodeStream(skip_special_tokens=True)
    )
