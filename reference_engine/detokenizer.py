"""Incremental detokenization with stop strings, for streaming.

Decoding token by token breaks multi-byte characters and merges (a byte-level BPE token
may be half a UTF-8 character), so each step decodes a short window of recent tokens and
emits only the text that is new and complete. Text that could be the start of a stop
string is held back until it is known not to be one, so a stop string never leaks into
the stream.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Decode = Callable[[list[int]], str]
_utf_8_decode = codecs.utf_8_decode  # a global, not an attribute lookup, per token per stream


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
        emitted = self.emitted
        if end <= emitted:
            return ""
        self.emitted = end
        return self.text[emitted:end]

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


@dataclass(slots=True)
class ByteTableDetokenizer(IncrementalDetokenizer):
    """The same for a byte-level BPE tokenizer (GPT-2's scheme: SmolLM2, Llama 3, Qwen), where a
    token is a fixed byte string: one table lookup and an incremental UTF-8 decode per token,
    several times cheaper again than DecodeStream (which re-decodes a window in Rust), which
    matters at hundreds of streams. Bytes of an unfinished character wait in `pending`
    (text complete so far goes out at once, where DecodeStream holds back the whole token); if
    the sequence ends on them they are dropped, as the other detokenizers drop them. Invalid
    bytes become U+FFFD, as the tokenizer's own decode makes them. Ids the table does not know
    decode to nothing."""

    pieces: list[bytes] = field(default_factory=list)  # token id -> its bytes
    pending: bytes = b""  # the start of a character whose other bytes have not come yet

    def add(self, token_ids: list[int]) -> None:
        pieces = self.pieces
        try:
            data = pieces[token_ids[0]] if len(token_ids) == 1 else b"".join(pieces[t] for t in token_ids)
        except IndexError:
            data = b"".join(pieces[t] for t in token_ids if 0 <= t < len(pieces))
        if self.pending:
            data = self.pending + data
        text, used = _utf_8_decode(data, "replace", False)  # not final: keeps a partial end
        self.pending = data[used:] if used < len(data) else b""
        self.text += text


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte -> the byte (its `bytes_to_unicode`):
    printable Latin-1 bytes stand for themselves, the other 68 for code points 256 onwards."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {chr(b): b for b in kept} | {chr(256 + i): b for i, b in enumerate(moved)}


def byte_level_pieces(backend: Any) -> list[bytes]:
    """Every token's bytes as a `tokenizers.Tokenizer` with a ByteLevel decoder decodes it with
    `skip_special_tokens`: special tokens are empty; a token whose characters are all stand-ins
    maps through them; any other (an added token such as `<|im_start|>`) is its own UTF-8."""
    alphabet = _byte_level_alphabet()
    special = {token_id for token_id, added in backend.get_added_tokens_decoder().items() if added.special}
    pieces = []
    for token_id in range(backend.get_vocab_size(with_added_tokens=True)):
        token = backend.id_to_token(token_id)
        if token is None or token_id in special:
            pieces.append(b"")
        elif all(c in alphabet for c in token):
            pieces.append(bytes(alphabet[c] for c in token))
        else:
            pieces.append(token.encode())
    return pieces


def detokenizer_factory(tokenizer: Any) -> Callable[[Sequence[str]], IncrementalDetokenizer]:
    """stop strings -> a new detokenizer for one sequence of `tokenizer`'s: the byte table where
    its backend is a `tokenizers.Tokenizer` with a ByteLevel decoder, the streaming one for any
    other such backend, else the window decoder over `decode`."""
    backend = getattr(tokenizer, "backend", None)
    try:
        import tokenizers
        from tokenizers.decoders import ByteLevel, DecodeStream
    except ImportError:  # a tokenizers release without DecodeStream (< 0.21)
        backend = None
    if backend is None or not isinstance(backend, tokenizers.Tokenizer):
        return lambda stop: IncrementalDetokenizer(tokenizer.decode, list(stop))
    if isinstance(backend.decoder, ByteLevel):
        pieces = byte_level_pieces(backend)
        return lambda stop: ByteTableDetokenizer(tokenizer.decode, list(stop), pieces=pieces)
    return lambda stop: StreamDetokenizer(
        tokenizer.decode, list(stop), backend=backend, stream=DecodeStream(skip_special_tokens=True)
    )
