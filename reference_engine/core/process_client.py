"""`ProcessCoreClient`: the engine core in its own process, over ZeroMQ (vLLM V1's design).

The server binds a PUSH socket (commands) and a PULL socket (outputs) on IPC paths in a
private temporary directory (mode 0700, so no other local user can connect), then starts
`python -m reference_engine.core.process` with the `CoreLaunch` on its stdin. Startup
overlaps: the core loads its model while the server loads its tokenizer.

Sending never blocks the event loop (no high-water mark; ZeroMQ's I/O thread writes).
Receiving is a reader callback on the PULL socket's file descriptor that decodes each
`CoreOutputs` (msgspec) and hands it on at once; `deliver_waiting` runs the same drain from
anywhere on the loop, so that the server can route outputs before other work (a frame handed
to a future first would let a later frame, drained meanwhile, overtake it).
A thread waits on the child: if it exits while the server still needs it, `on_exit` runs on
the event loop with its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable

import msgspec
import zmq

from reference_engine.core.client import CoreStartError, OnExit, OnOutputs
from reference_engine.core.launch import CoreLaunch
from reference_engine.core.messages import (
    Command,
    CoreOutputs,
    CoreReady,
    CoreStartFailed,
    Handshake,
    Shutdown,
)

log = logging.getLogger("kvscope.server")
# Longest a core may take to load its model and report ready.
READY_TIMEOUT_S = 600.0


class ProcessCoreClient:
    def __init__(self, launch: CoreLaunch, env: dict[str, str] | None = None):
        self.launch = launch
        self.env = env
        self.proc: subprocess.Popen | None = None
        self._dir: str | None = None
        self._sync_ctx: zmq.Context | None = None
        self._push: zmq.Socket | None = None
        self._pull: zmq.Socket | None = None
        self._on_frame: Callable[[zmq.Frame], None] | None = None
        self._exited: asyncio.Event | None = None
        self._on_exit: OnExit | None = None
        self._alive = False  # the child runs and reads commands
        self._stopping = False
        self._closed = False
        self._encoder = msgspec.msgpack.Encoder()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def spawn(self) -> None:
        """Bind the sockets and start the child (idempotent). Call early: the child's model
        load then overlaps whatever the server does before `start`."""
        if self.proc is not None:
            return
        self._dir = tempfile.mkdtemp(prefix="kvscope-core-")  # mode 0700
        input_addr = f"ipc://{self._dir}/input"
        output_addr = f"ipc://{self._dir}/output"
        self._sync_ctx = zmq.Context()
        self._push = self._sync_ctx.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, 0)
        self._push.setsockopt(zmq.LINGER, 0)
        self._push.bind(input_addr)
        self._pull = self._sync_ctx.socket(zmq.PULL)
        self._pull.setsockopt(zmq.RCVHWM, 0)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._pull.bind(output_addr)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reference_engine.core.process", input_addr, output_addr],
            stdin=subprocess.PIPE,
            env=self.env,
        )
        self._alive = True
        self.proc.stdin.write(msgspec.json.encode(self.launch))
        self.proc.stdin.close()

    async def start(self, on_outputs: OnOutputs, on_exit: OnExit) -> CoreReady:
        self.spawn()
        loop = asyncio.get_running_loop()
        self._exited = asyncio.Event()
        self._on_exit = on_exit
        threading.Thread(
            target=self._wait_child, args=(loop,), name="kvscope-core-monitor", daemon=True
        ).start()
        first: asyncio.Future[zmq.Frame] = loop.create_future()
        decoder = msgspec.msgpack.Decoder(CoreOutputs)

        def on_frame(frame: zmq.Frame) -> None:
            if not first.done():
                first.set_result(frame)  # the handshake; the core sends nothing else before it
            else:
                on_outputs(decoder.decode(frame.buffer))

        self._on_frame = on_frame
        loop.add_reader(self._pull.getsockopt(zmq.FD), self.deliver_waiting)
        self.deliver_waiting()  # the descriptor signals changes only: take what came before
        exited = asyncio.ensure_future(self._exited.wait())
        done, _ = await asyncio.wait(
            {first, exited}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        exited.cancel()
        if first not in done:
            first.cancel()
            await self.stop(5.0)
            reason = (
                f"exited with status {self.proc.returncode}"
                if self.proc.returncode is not None
                else (f"did not report ready within {READY_TIMEOUT_S:.0f} s")
            )
            raise CoreStartError(f"the engine core {reason}; see its log above")
        message = msgspec.msgpack.decode(first.result().buffer, type=Handshake)
        if isinstance(message, CoreStartFailed):
            await self.stop(30.0)
            raise CoreStartError(message.message)
        return message

    def deliver_waiting(self) -> None:
        """Hand on every frame the core has sent that is not handled yet, in order."""
        if self._on_frame is None:
            return  # not started: nothing can have arrived
        pull = self._pull
        # ZeroMQ's descriptor is edge-triggered: drain until the socket says it holds none.
        while not self._closed and pull.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frame = pull.recv(zmq.NOBLOCK, copy=False)
            try:
                self._on_frame(frame)
            except Exception:  # one bad frame must not stop the routing of every later one
                log.exception("handling the engine core's outputs failed")

    def _wait_child(self, loop: asyncio.AbstractEventLoop) -> None:
        status = self.proc.wait()
        try:
            loop.call_soon_threadsafe(self._child_exited, status)
        except RuntimeError:
            pass  # the event loop is closed: the server is gone already

    def _child_exited(self, status: int) -> None:
        self._alive = False
        self._exited.set()
        if not self._stopping and self._on_exit is not None:
            log.error("the engine core process exited unexpectedly (status %s)", status)
            self._on_exit(status)

    def send(self, command: Command) -> None:
        if self._alive:
            self._push.send(self._encoder.encode(command), copy=False)

    async def stop(self, timeout: float) -> int | None:
        if self.proc is None or self._closed:
            return None if self.proc is None else self.proc.returncode
        self._stopping = True
        if self.proc.poll() is None and self._alive:
            # Never block on a core that may be gone already (one that failed to start exits
            # on its own; a PUSH socket without a peer would wait forever).
            with contextlib.suppress(zmq.Again):
                self._push.send(self._encoder.encode(Shutdown()), flags=zmq.NOBLOCK)
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.proc.wait, timeout)
            except subprocess.TimeoutExpired:
                log.warning("the engine core did not exit within %.0f s; killing it", timeout)
                self.proc.kill()
                self.proc.wait()
        self._alive, self._closed = False, True
        if self._on_frame is not None:
            asyncio.get_running_loop().remove_reader(self._pull.getsockopt(zmq.FD))
        self._pull.close()
        self._push.close()
        self._sync_ctx.term()
        shutil.rmtree(self._dir, ignore_errors=True)
        return self.proc.returncode
