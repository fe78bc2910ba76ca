"""The engine core process: `python -m reference_engine.core.process INPUT_ADDR OUTPUT_ADDR`,
with its `CoreLaunch` as JSON on stdin. Started by `ProcessCoreClient`, not by users.

Sockets: the API server binds both (IPC paths in a private directory); the core connects a
PULL socket to the input address and a PUSH socket to the output address. First message
out is `CoreReady` (or `CoreStartFailed`, then exit status 2); then `CoreOutputs`.

No threads: the busy loop itself polls for commands between steps (non-blocking) and waits
on the socket when idle, so nothing competes with a step for the interpreter.

Lifecycle: the server owns it. SIGINT and SIGTERM are ignored (a terminal's Ctrl-C or a
service manager's SIGTERM reaches the whole process group, and the server must drain
first); the core exits on `Shutdown`, or within a second of its parent process going away.
SIGKILL ends it at once; the server notices and stops.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import msgspec
import zmq

from reference_engine.core.messages import Command, CoreOutputs, CoreStartFailed

# How often an idle core checks that its parent is still there.
PARENT_CHECK_MS = 1000
EXIT_START_FAILED = 2

log = logging.getLogger("kvscope.core")


class ZmqTransport:
    """The core side of the two sockets (`CoreTransport`)."""

    def __init__(self, pull: zmq.Socket, push: zmq.Socket, parent_pid: int):
        self.pull, self.push, self.parent_pid = pull, push, parent_pid
        self._decoder = msgspec.msgpack.Decoder(Command)
        self._encoder = msgspec.msgpack.Encoder()

    def receive(self, block: bool) -> list[Command] | None:
        commands: list[Command] = []
        while block and not self.pull.poll(PARENT_CHECK_MS):
            if os.getppid() != self.parent_pid:
                return None  # the server is gone; nobody will read what we produce
        while True:
            try:
                frame = self.pull.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return commands
            commands.append(self._decoder.decode(frame.buffer))

    def send(self, outputs: CoreOutputs) -> None:
        self.push.send(self._encoder.encode(outputs), copy=False)


def main(argv: list[str] | None = None) -> int:
    from reference_engine.config import ConfigError
    from reference_engine.core.core_loop import CoreLoop
    from reference_engine.core.engine_core import EngineCore
    from reference_engine.core.launch import CoreLaunch, build_core, write_step_records
    from reference_engine.model.errors import ModelLoadError

    input_addr, output_addr = argv if argv is not None else sys.argv[1:3]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=os.environ.get("KVSCOPE_CORE_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    parent = os.getppid()
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)  # never drop or block on outputs: the server reads them all
    push.setsockopt(zmq.LINGER, 5000)  # what was sent before exit still arrives
    pull.connect(input_addr)
    push.connect(output_addr)
    encoder = msgspec.msgpack.Encoder()
    try:
        launch = msgspec.json.decode(sys.stdin.buffer.read(), type=CoreLaunch)
        built = build_core(launch, pid=os.getpid())
    except (ConfigError, ModelLoadError, OSError, ValueError, msgspec.ValidationError) as exc:
        push.send(encoder.encode(CoreStartFailed(str(exc))))
        push.close()
        return EXIT_START_FAILED
    push.send(encoder.encode(built.ready))
    loop = CoreLoop(EngineCore(built.engine), ZmqTransport(pull, push, parent), built.on_step_start)
    loop.run()
    write_step_records(launch, built)
    pull.close(linger=0)
    push.close()
    ctx.term()
    return 1 if loop.failed else 0


if __name__ == "__main__":
    sys.exit(main())
