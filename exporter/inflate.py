"""A response body read a chunk at a time under one cap, decompressed as it arrives.

The cap holds for the bytes on the wire and for the decompressed body alike, and is checked
while reading: compressed chunks are inflated at once (never held) with zlib's `max_length`
set to what is left under the cap, so a gzip bomb costs at most `cap` + one chunk of memory
before it is refused, whatever its ratio. gzip and deflate (zlib-wrapped or raw) are read,
and a gzip body served without Content-Encoding (a .gz file) is recognised by its magic.

Failures are values (`BodyError`), not exceptions travelling through frames that hold the
buffers: an exception's traceback keeps its frames' locals alive until the cyclic garbage
collector runs, which with asyncio's task/traceback cycles let every refused 10 MiB buffer
pile up (hundreds of MB under a bomb).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BodyError:
    reason: str  # "too_large" or "decode"
    detail: str


class CappedBody:
    """Feed chunks with `feed`; `finish` returns the body. After a BodyError nothing more is
    kept and every call returns it again."""

    __slots__ = ("cap", "encoding", "_buf", "_wire", "_inflater", "_error", "_started")

    def __init__(self, encoding: str, cap: int) -> None:
        self.cap = cap
        self.encoding = encoding.strip().lower()
        self._buf = bytearray()
        self._wire = 0
        self._inflater: zlib._Decompress | None = None
        self._error: BodyError | None = None
        self._started = False

    def _fail(self, reason: str, detail: str) -> BodyError:
        self._error = BodyError(reason, detail)
        self._buf = bytearray()  # released now, whoever still holds this object
        self._inflater = None
        return self._error

    def _start(self, first: bytes) -> BodyError | None:
        self._started = True
        enc = self.encoding
        if enc in ("gzip", "x-gzip") or (not enc and first[:2] == b"\x1f\x8b"):
            self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._inflater = zlib.decompressobj(zlib.MAX_WBITS if first[:1] == b"\x78" else -zlib.MAX_WBITS)
        elif enc not in ("", "identity"):
            return self._fail("decode", f"unsupported Content-Encoding {enc!r}")
        return None

    def _inflate(self, data: bytes, flush: bool = False) -> BodyError | None:
        assert self._inflater is not None
        room = self.cap - len(self._buf)
        try:
            out = self._inflater.flush(room + 1) if flush else self._inflater.decompress(data, room + 1)
        except zlib.error as e:
            return self._fail("decode", f"corrupt {self.encoding or 'gzip'} body: {e}")
        if len(out) > room:
            return self._fail("too_large", f"decompressed body exceeds {self.cap} bytes")
        self._buf += out
        return None

    def feed(self, chunk: bytes) -> BodyError | None:
        if self._error is not None:
            return self._error
        self._wire += len(chunk)
        if self._wire > self.cap:
            return self._fail("too_large", f"body exceeds {self.cap} bytes")
        if not self._started and (error := self._start(chunk)) is not None:
            return error
        if self._inflater is None:
            self._buf += chunk
            return None
        return self._inflate(chunk)

    def finish(self) -> bytearray | BodyError:
        """The whole (decompressed) body; the caller owns it and this object forgets it."""
        if self._error is not None:
            return self._error
        if self._inflater is not None and (error := self._inflate(b"", flush=True)) is not None:
            return error
        body, self._buf = self._buf, bytearray()
        return body

    @property
    def wire_bytes(self) -> int:
        return self._wire
