"""Prompt fingerprints: what the advisor knows about prompt text without keeping the text.

A fingerprint is the sequence of hashes of a prompt's leading chunks, plus each chunk's
length in characters. Two prompts share a byte-identical prefix of k chunks exactly when
their first k hashes are equal (up to a 2^-64 collision chance), which is the sharing a
prefix cache can exploit; a prompt whose early chunk differs (a timestamp in a system
prompt) but whose later chunks match another prompt's is sharing the cache cannot use.

Chunks are content-defined, not fixed-width: a chunk ends after a word (a run of
non-space characters with its trailing whitespace) whose CRC-32 is divisible by
`BOUNDARY_MODULUS`, so boundaries depend only on local content. A differing span of a
different *length* ("9:05" vs "10:05") therefore disturbs only the chunk(s) around it and
the two sequences re-align after it; fixed-width chunks would shift every later chunk.
Words longer than `MAX_WORD_CHARS` are cut into pieces first (text without spaces still
chunks), and a chunk never exceeds `MAX_CHUNK_WORDS` words.

Invariants: deterministic across processes and machines (CRC-32 and BLAKE2b, never
Python's salted `hash`); at most `MAX_CHUNKS` chunks (~13 k characters, ~3 k tokens) are
kept, so a fingerprint is bounded (<= 3 KiB); the lengths sum to the characters covered.
Hashes are signed 64-bit integers so they store as parquet int64 lists.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

BOUNDARY_MODULUS = 8  # ~8 words (~50 characters of English) per chunk on average
MAX_CHUNK_WORDS = 32
MAX_WORD_CHARS = 64
MAX_CHUNKS = 256
MESSAGE_SEPARATOR = "\x1e"  # between chat messages (never in normal text)

_WORD = re.compile(rf"\S{{1,{MAX_WORD_CHARS}}}\s*|\s+")

# Column names the harness writes into requests.parquet (see `record_columns`).
HASHES_COLUMN = "prompt_chunk_hashes"
CHARS_COLUMN = "prompt_chunk_chars"
TOTAL_COLUMN = "prompt_chars"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """`hashes[i]` and `chars[i]` describe chunk i; `total_chars` is the whole prompt's
    length (the chunks may cover less of it when the prompt has over MAX_CHUNKS chunks)."""

    hashes: tuple[int, ...]
    chars: tuple[int, ...]
    total_chars: int


def _chunk_hash(text: str, salt: bytes) -> int:
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, key=salt).digest()
    return int.from_bytes(digest, "little", signed=True)


@lru_cache(maxsize=1 << 16)
def _ends_chunk(word: str) -> bool:
    """Does a chunk end after this word (with its trailing whitespace)? Memoised: prompts
    repeat their words, and this runs on the load generator for every request."""
    stripped = word.rstrip()
    return bool(stripped) and zlib.crc32(stripped.encode("utf-8", "surrogatepass")) % BOUNDARY_MODULUS == 0


def chunks(text: str) -> list[str]:
    """The content-defined chunks of `text`, in order; "".join(chunks(t)) == t."""
    out: list[str] = []
    current: list[str] = []
    for word in _WORD.findall(text):
        current.append(word)
        if _ends_chunk(word) or len(current) >= MAX_CHUNK_WORDS:
            out.append("".join(current))
            current = []
            if len(out) >= MAX_CHUNKS:
                return out
    if current:
        out.append("".join(current))
    return out


def fingerprint(text: str, salt: bytes = b"") -> Fingerprint:
    """The fingerprint of one prompt's text. `salt` (<= 64 bytes, e.g. the run id) makes
    hashes of short, guessable chunks useless outside the run; use the same salt for every
    request of a run, or nothing will match."""
    parts = chunks(text)
    return Fingerprint(tuple(_chunk_hash(p, salt) for p in parts), tuple(len(p) for p in parts), len(text))


def prompt_text(body: Mapping[str, Any]) -> str:
    """The text an OpenAI request body sends, in the order the server sees it: the
    completions `prompt`, or the chat messages' contents joined by MESSAGE_SEPARATOR (roles
    are left out: they are the same in every request and the template adds them anyway)."""
    if "prompt" in body:
        prompt = body["prompt"]
        return prompt if isinstance(prompt, str) else MESSAGE_SEPARATOR.join(map(str, prompt))
    parts = []
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        parts.append("" if content is None else str(content))
    return MESSAGE_SEPARATOR.join(parts)


def record_columns(body: Mapping[str, Any], salt: bytes = b"") -> dict[str, Any]:
    """The three requests.parquet columns for one request body, ready to merge into a record."""
    fp = fingerprint(prompt_text(body), salt)
    return {HASHES_COLUMN: list(fp.hashes), CHARS_COLUMN: list(fp.chars), TOTAL_COLUMN: fp.total_chars}
