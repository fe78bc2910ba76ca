"""A response body read a chunk at a time under one cap, decompressed as it arrives.

The cap holds for the bytes on the wire and for the decompressed body alike, and is checked
while reading: compressed chunks are inflated as they come (never held) with zlib's
`max_length` set to what is left under the cap, so a gzip bomb costs at most `cap` + one
chunk of memory before it is refused, whatever its ratio. Inflating runs in steps of at most
`STEP_BYTES` of output (`pending` / `step`), so the caller can yield to its event loop
between steps: one 64 KiB chunk of a bomb is 10 MiB of output, ~15 ms of zlib in one call.
gzip and deflate (zlib-wrapped or raw) are read, and a gzip body served without
Content-Encoding (a .gz file) is recognised by its magic.

Failures are values (`BodyError`), not exceptions travelling through frames that hold the
buffers: an exception's traceback keeps its frames' locals alive until the cyclic garbage
collector runs, which with asyncio's task/traceback cycles let every refused 10 MiB buffer
pile up (hundreds of MB under a bomb).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

STEP_BYTES = 1 << 18


@dataclass(frozen=True, slots=True)
class BodyError:
    reason: str  # "too_large" or "decode"
    detail: str


class CappedBody:
    """Feed chunks with `feed`; `finish` returns the body. After a BodyError nothing more is
    kept and every call returns it again."""

    __slots__ = ("cap", "encoding", "_parts", "_size", "_wire", "_inflater", "_error", "_started", "_input")

    def __init__(self, encoding: str, cap: int) -> None:
        self.cap = cap
        self.encoding = encoding.strip().lower()
        # Pieces, joined once at the end: growing one buffer would copy it again and again.
        self._parts: list[bytes] = []
        self._size = 0
        self._wire = 0
        self._inflater: zlib._Decompress | None = None
        self._error: BodyError | None = None
        self._started = False
        self._input = b""  # compressed bytes not inflated yet

    def _fail(self, reason: str, detail: str) -> BodyError:
        self._error = BodyError(reason, detail)
        self._parts = []  # released now, whoever still holds this object
        self._inflater = None
        self._input = b""
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

    def _inflate(self, flush: bool = False) -> BodyError | None:
        assert self._inflater is not None
        room = self.cap - self._size
        want = min(room + 1, STEP_BYTES)
        try:
            if flush:
                out = self._inflater.flush(room + 1)
            else:
                out = self._inflater.decompress(self._input, want)
                self._input = self._inflater.unconsumed_tail
        except zlib.error as e:
            return self._fail("decode", f"corrupt {self.encoding or 'gzip'} body: {e}")
        if len(out) > room:
            return self._fail("too_large", f"decompressed body exceeds {self.cap} bytes")
        self._keep(out)
        return None

    def _keep(self, data: bytes) -> None:
        if data:
            self._parts.append(data)
            self._size += len(data)

    @property
    def pending(self) -> bool:
        """Input is left to inflate: call `step` (after yielding, if on an event loop)."""
        return bool(self._input) and self._error is None

    def step(self) -> BodyError | None:
        """Inflate at most STEP_BYTES more of the pending input."""
        return self._error if self._error is not None else self._inflate()

    def feed(self, chunk: bytes) -> BodyError | None:
        if self._error is not None:
            return self._error
        self._wire += len(chunk)
        if self._wire > self.cap:
            return self._fail("too_large", f"body exceeds {self.cap} bytes")
        if not self._started and (error := self._start(chunk)) is not None:
            return error
        if self._inflater is None:
            self._keep(chunk)
            return None
        self._input += chunk
        return self._inflate()

    def finish(self) -> bytes | BodyError:
        """The whole (decompressed) body; the caller owns it and this object forgets it."""
        if self._error is not None:
            return self._error
        while self.pending:
            if (error := self.step()) is not None:
                return error
        if self._inflater is not None and (error := self._inflate(flush=True)) is not None:
            return error
        parts, self._parts = self._parts, []
        return b"".join(parts)

    @property
    def wire_bytes(self) -> int:
        return self._wire
