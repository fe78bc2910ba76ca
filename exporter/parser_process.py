"""Parser processes: `analysis.analyse_body` run in child processes, driven from the event loop.

Why processes and not threads: a thread parsing a large body still holds the GIL for tens of
milliseconds at a time (its garbage collections, freeing what it built), which stalls the
event loop and so /healthz. Why not `concurrent.futures.ProcessPoolExecutor`: with `spawn`
it re-imports the parent's main module in each child and starts a resource-tracker process
(~14 MB) besides; here a child is `python -m exporter.parser_process` importing only the
stdlib-only analysis, and the protocol is a pair of pipes.

Protocol: on its stdin the child reads requests, each two frames (8-byte big-endian length,
then the data): a pickle of `(charset, dialect, limits, probe input)`, then the raw body (written from
the caller's buffer, never copied into a pickle); it answers each with one frame holding the
pickled `Analysis`. After each request it returns freed memory to the OS, so a large body
does not leave the child holding its peak.
Both ends are this module; the child only ever sees a target's body as text to parse, so
what comes back is this code's own objects (the pickles never cross a trust boundary).
A child that dies (killed for memory) fails the analysis in hand as "internal" and is
replaced on the next use.

The exchange is blocking pipe I/O on one thread per child (`ParserPool`'s own), which the
event loop awaits: the GIL is released while the child works, nothing is tied to one event
loop, and a cancelled scrape cannot leave a pipe half-written. Children are killed by
`kill()` or when the pool is garbage-collected; a child whose parent vanished sees its stdin
close and exits.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import pickle
import queue
import struct
import subprocess
import sys
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from exporter.analysis import Analysis, Limits, analyse_body
from exporter.dialects.probe import ProbeInput

_LENGTH = struct.Struct(">Q")
# The directory holding the `exporter` package, so the child imports this very copy.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("the parser process closed its pipe")
    return data


class ParserProcess:
    """One child; `analyse` blocks until it answers. Not for two threads at once."""

    __slots__ = ("_proc",)

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        return subprocess.Popen(
            [sys.executable, "-m", "exporter.parser_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def analyse(
        self, body: bytes, charset: str, dialect: str, limits: Limits, probe: ProbeInput | None = None
    ) -> Analysis:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        head = pickle.dumps((charset, dialect, limits, probe), protocol=5)
        try:
            for frame in (head, body):
                proc.stdin.write(_LENGTH.pack(len(frame)))
                proc.stdin.write(frame)
            proc.stdin.flush()
            del body
            (n,) = _LENGTH.unpack(_read_exactly(proc.stdout, _LENGTH.size))
            answer = _read_exactly(proc.stdout, n)
        except (OSError, EOFError):  # BrokenPipeError is an OSError
            self.kill()
            return Analysis("internal", "the parser process died (out of memory?); it is restarted")
        return pickle.loads(answer)

    @property
    def pid(self) -> int | None:
        running = self._proc is not None and self._proc.poll() is None
        return self._proc.pid if running else None  # type: ignore[union-attr]

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _kill_all(parsers: list[ParserProcess], threads: ThreadPoolExecutor) -> None:
    for parser in parsers:
        parser.kill()
    threads.shutdown(wait=False)


class ParserPool:
    """Up to `size` parser processes, started on first use; `analyse` waits for a free one."""

    def __init__(self, size: int) -> None:
        size = max(1, size)
        self._all = [ParserProcess() for _ in range(size)]
        # Last in, first out: one large target keeps reusing one child, the others never start.
        self._idle: queue.LifoQueue[ParserProcess] = queue.LifoQueue()
        for parser in self._all:
            self._idle.put(parser)
        # As many threads as children: a job never waits for a child while holding a thread.
        self._threads = ThreadPoolExecutor(size, thread_name_prefix="kvscope-parser")
        self._finalizer = weakref.finalize(self, _kill_all, self._all, self._threads)

    def _exchange(
        self, body: bytes, charset: str, dialect: str, limits: Limits, probe: ProbeInput | None
    ) -> Analysis:
        parser = self._idle.get()
        try:
            return parser.analyse(body, charset, dialect, limits, probe)
        finally:
            self._idle.put(parser)

    async def analyse(
        self, body: bytes, charset: str, dialect: str, limits: Limits, probe: ProbeInput | None = None
    ) -> Analysis:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._threads, self._exchange, body, charset, dialect, limits, probe
        )

    def kill(self) -> None:
        """Kill every child and stop the threads (waits for an exchange in progress to fail)."""
        self._finalizer()

    @property
    def pids(self) -> list[int]:
        """The running children's process ids."""
        return [pid for p in self._all if (pid := p.pid) is not None]


def _frame(stdin: IO[bytes]) -> bytes | None:
    head = stdin.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (n,) = _LENGTH.unpack(head)
    return _read_exactly(stdin, n)


def _release_memory() -> Callable[[], object]:
    """glibc's malloc_trim (hands freed heap pages back to the OS), or a no-op elsewhere."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return lambda *_: None


def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: one request in, one answer out, until stdin closes."""
    trim = _release_memory()
    while (head := _frame(stdin)) is not None:
        charset, dialect, limits, probe = pickle.loads(head)
        body = _frame(stdin)
        if body is None:
            return
        answer = pickle.dumps(analyse_body(body, charset, dialect, limits, probe), protocol=5)
        del body
        stdout.write(_LENGTH.pack(len(answer)))
        stdout.write(answer)
        stdout.flush()
        del answer
        gc.collect()
        trim(0)


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
