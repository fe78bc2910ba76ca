"""The state one kvscope Locust process keeps for its environment, and the Locust hooks.

One `RunContext` per Locust `Environment` (stored on it as `environment.kvscope`), created
on `init` and re-armed on every `test_start`, so nothing lives in module globals and a
process that runs several tests (web UI) starts each one clean. Its role follows the
runner: "local" (one process: sends and collects), "worker" (sends), "master" (collects,
tells workers when to drain; runs no users).

Options are read at `test_start`, not at `init`: a worker only learns the master's custom
arguments from the spawn message that precedes `test_start`.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import gevent
from gevent.lock import Semaphore

from harness.load.transport import (
    ABORT_MSG,
    DRAIN_MSG,
    DRAINED_MSG,
    RECORDS_MSG,
    RecordCollector,
    RecordSender,
    wait_until,
    write_status,
)
from harness.workload.arrivals import ArrivalKind, ArrivalSchedule
from harness.workload.backoff import Backoff
from harness.workload.calibration import Calibration
from harness.workload.options import API_KEY_ENV, DRAIN_TIMEOUT_S, REQUEST_TIMEOUT_S
from harness.workload.record import Endpoint

log = logging.getLogger("kvscope.locust")
# local: one process that sends and collects; worker: sends; master: collects, runs no users.
Role = Literal["local", "master", "worker"]
SCHEDULE_LEAD_S = 0.5  # open-loop arrivals start this long after test_start, once users exist
ABORT_KILL_S = 0.5  # a stop-at-once waits this long for killed users to record their aborts
ABORT_SIGNAL = signal.SIGUSR1


@dataclass(frozen=True, slots=True)
class CommonOptions:
    endpoint: Endpoint = "chat"
    model: str = ""
    api_key: str = ""
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int = 0
    rate: float = 0.0
    arrival: ArrivalKind = "poisson"
    think_time: float = 0.0
    request_timeout: float = REQUEST_TIMEOUT_S
    drain_timeout: float = DRAIN_TIMEOUT_S
    calibrate: bool = True
    traceparent: bool = True
    warmup_s: float = 0.0
    records_out: str = ""
    status_out: str = ""

    @classmethod
    def from_namespace(cls, ns: Any) -> CommonOptions:
        d = cls()
        get = (lambda k, default: getattr(ns, k, default)) if ns is not None else (lambda k, default: default)
        return cls(
            endpoint=get("endpoint", d.endpoint),
            model=get("model", d.model) or "",
            # kvscope run passes the key in the environment, never on a command line (`ps`).
            api_key=get("api_key", "") or os.environ.get(API_KEY_ENV, ""),
            temperature=float(get("temperature", d.temperature)),
            ignore_eos=not get("no_ignore_eos", False),
            seed=int(get("seed", d.seed)),
            rate=float(get("rate", d.rate) or 0.0),
            arrival=get("arrival", d.arrival),
            think_time=float(get("think_time", d.think_time)),
            request_timeout=float(get("request_timeout", d.request_timeout)),
            drain_timeout=float(get("drain_timeout", d.drain_timeout)),
            calibrate=not get("no_calibrate", False),
            traceparent=not get("no_traceparent", False),
            warmup_s=max(0.0, float(get("warmup_s", d.warmup_s) or 0.0)),
            records_out=get("records_out", "") or "",
            status_out=get("status_out", "") or "",
        )


@dataclass(slots=True)
class ServerInfo:
    model: str
    max_model_len: int | None = None


@dataclass(slots=True)
class RunContext:
    environment: Any
    role: Role
    worker_id: str
    worker_index: int = 0
    worker_count: int = 1
    sender: RecordSender | None = None
    collector: RecordCollector | None = None
    opts: CommonOptions = field(default_factory=CommonOptions)
    t0_unix: float = 0.0
    draining: bool = False
    aborting: bool = False  # stop now: in-flight requests are recorded as aborted, not awaited
    in_flight: int = 0
    seq: int = 0
    users_started: int = 0
    schedule: ArrivalSchedule | None = None
    server: ServerInfo | None = None
    calibration: Calibration | None = None
    setup_lock: Semaphore = field(default_factory=Semaphore)
    cache: dict[str, Any] = field(default_factory=dict)  # per-test workload data (prefix texts, dataset)
    backoff: Backoff = field(default_factory=Backoff)  # shared by this process's users

    @property
    def options(self) -> Any:
        """Locust's parsed options (workload-specific values are read from here by dest)."""
        return self.environment.parsed_options

    @property
    def warmup_end_unix(self) -> float:
        """Requests sent before this are warm-up (phase "warmup"), kept out of every statistic;
        0 without --warmup-s (nothing is warm-up)."""
        return self.t0_unix + self.opts.warmup_s if self.opts.warmup_s > 0 else 0.0

    def next_request_id(self) -> str:
        self.seq += 1
        return f"{self.worker_id}-{self.seq}"

    def reset_for_test(self) -> None:
        self.opts = CommonOptions.from_namespace(self.environment.parsed_options)
        self.draining = False
        self.aborting = False
        self.schedule = None
        self.server = None
        self.calibration = None
        self.cache = {}
        self.backoff = Backoff()


def context(environment: Any) -> RunContext:
    ctx = getattr(environment, "kvscope", None)
    if ctx is None:
        raise RuntimeError(
            "kvscope's Locust hooks are not installed (import harness.load.user in the locustfile)"
        )
    return ctx


def _role(runner: Any) -> Role:
    name = type(runner).__name__
    return "master" if name == "MasterRunner" else "worker" if name == "WorkerRunner" else "local"


def drain_local(ctx: RunContext) -> None:
    """Stop starting requests, let the in-flight ones finish (bounded), send the last batch.

    Requests still in flight when --drain-timeout runs out are ended here, so their "aborted"
    records are in that last batch: left to Locust's own stop, they would be recorded after
    the worker has acknowledged the drain, when the master may already be gone, and the run
    would lose them without a word. Waits once per test: a worker drained by the master is
    stopped again by Locust right after, and must not wait a second --drain-timeout while
    the master is already leaving.
    """
    if not ctx.draining:
        ctx.draining = True
        if not wait_until(lambda: ctx.in_flight == 0 or ctx.aborting, ctx.opts.drain_timeout):
            log.warning(
                "%d request(s) still in flight after --drain-timeout %.0fs; they are recorded as aborted",
                ctx.in_flight,
                ctx.opts.drain_timeout,
            )
            _kill_users(ctx)
    if ctx.sender is not None:
        ctx.sender.flush()


def _kill_users(ctx: RunContext) -> None:
    """End this process's users now; `LLMUser.send` records each one's request in flight as
    aborted on the way out (bounded: a user that ignores the kill is left to Locust)."""
    greenlets = getattr(ctx.environment.runner, "user_greenlets", None)
    if greenlets is not None:
        greenlets.kill(block=True, timeout=ABORT_KILL_S)


def abort_local(ctx: RunContext) -> None:
    """Stop now (a second Ctrl-C): no new requests, the in-flight ones are ended and recorded
    as aborted (their users are killed; `LLMUser.send` records the abort on the way out),
    and every record is sent to the master at once, so a fast stop loses none."""
    ctx.aborting = ctx.draining = True
    _kill_users(ctx)
    if ctx.sender is not None:
        ctx.sender.flush()


def _on_abort_signal(ctx: RunContext) -> None:
    """SIGUSR1: `kvscope run`'s second Ctrl-C. The master passes it on to every worker."""
    log.warning("told to stop at once: in-flight requests are recorded as aborted")
    if ctx.role == "master":
        ctx.aborting = True
        ctx.environment.runner.send_message(ABORT_MSG, {})
    else:
        abort_local(ctx)


def _on_test_stop(environment: Any, **_: Any) -> None:
    """After Locust has stopped the users: send what they recorded on the way out (aborted
    requests of a drain that timed out)."""
    ctx = context(environment)
    if ctx.sender is not None:
        ctx.sender.flush()


def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    runner = runner or environment.runner
    role = _role(runner)
    if role == "worker":
        worker_id = f"w{max(0, getattr(runner, 'worker_index', 0))}.{os.getpid()}"
    else:
        worker_id = "local"
    ctx = RunContext(environment=environment, role=role, worker_id=worker_id)
    environment.kvscope = ctx
    if role in ("local", "master"):
        ctx.collector = RecordCollector()
        runner.register_message(RECORDS_MSG, ctx.collector.on_records)
        runner.register_message(DRAINED_MSG, ctx.collector.on_drained)
        gevent.spawn(_status_loop, ctx)
    if role in ("local", "worker"):
        ctx.sender = RecordSender(runner, worker_id)
        gevent.spawn(ctx.sender.run_forever)
    if role == "worker":
        runner.register_message(DRAIN_MSG, lambda environment, msg, **_: _worker_drain(ctx), concurrent=True)
        runner.register_message(ABORT_MSG, lambda environment, msg, **_: abort_local(ctx), concurrent=True)
    gevent.signal_handler(ABORT_SIGNAL, _on_abort_signal, ctx)


def _worker_drain(ctx: RunContext) -> None:
    drain_local(ctx)
    runner = ctx.environment.runner
    send_stats = getattr(runner, "_send_stats", None)  # push Locust's stats now, not in up to 3 s
    if send_stats is not None:
        send_stats()
    runner.send_message(DRAINED_MSG, {"worker_id": ctx.worker_id})


def _on_test_start(environment: Any, **_: Any) -> None:
    ctx = context(environment)
    ctx.reset_for_test()
    opts, parsed = ctx.opts, environment.parsed_options
    if ctx.role == "master":
        # Shared by every worker through the spawn message's parsed_options: one t0 and one
        # worker count, so all workers cut the same global arrival schedule (and warm up
        # until the same moment), and the API key from the environment, so remote workers
        # get it as they would from --api-key.
        parsed.kvscope_t0 = time.time() + SCHEDULE_LEAD_S
        parsed.kvscope_worker_count = max(1, environment.runner.worker_count)
        parsed.api_key = opts.api_key
    if ctx.role in ("local", "master") and ctx.collector is not None:
        ctx.collector.path = opts.records_out or None
        ctx.collector.open()
    if ctx.role in ("local", "master") and not environment.stop_timeout:
        # When Locust lowers the user count (a shape's ramp-down, the web UI), a stopped user
        # finishes its request instead of being killed mid-stream (which would show up as an
        # abort on both sides). The master forwards this to workers in its spawn messages.
        environment.stop_timeout = opts.drain_timeout
    if ctx.role == "worker":
        ctx.t0_unix = float(getattr(parsed, "kvscope_t0", 0.0) or time.time() + SCHEDULE_LEAD_S)
        ctx.worker_count = int(
            getattr(parsed, "kvscope_worker_count", 0) or getattr(parsed, "expect_workers", 1) or 1
        )
        index = max(0, getattr(environment.runner, "worker_index", 0))
        if index >= ctx.worker_count:
            log.warning(
                "worker index %d >= %d workers at start: its arrivals duplicate worker %d's",
                index,
                ctx.worker_count,
                index % ctx.worker_count,
            )
        ctx.worker_index = index % ctx.worker_count
    else:
        ctx.t0_unix = time.time() + SCHEDULE_LEAD_S


def _on_test_stopping(environment: Any, **_: Any) -> None:
    ctx = context(environment)
    if ctx.role != "master":
        drain_local(ctx)
        return
    runner = environment.runner
    ctx.draining = True
    assert ctx.collector is not None
    ctx.collector.drained.clear()
    expected = {c.id for c in runner.clients.all}
    runner.send_message(DRAIN_MSG, {"drain_timeout": ctx.opts.drain_timeout})
    if not wait_until(lambda: expected <= ctx.collector.drained, ctx.opts.drain_timeout + 10.0):
        log.warning(
            "workers %s did not confirm the drain; their last records may be missing",
            sorted(expected - ctx.collector.drained),
        )


def _status_loop(ctx: RunContext) -> None:
    while True:
        gevent.sleep(1.0)
        path = ctx.opts.status_out
        if not path:
            continue
        runner = ctx.environment.runner
        try:
            write_status(
                path,
                {
                    "t": time.time(),
                    "state": runner.state,
                    "user_count": runner.user_count,
                    "worker_count": getattr(runner, "worker_count", 1),
                    "draining": ctx.draining,
                    "records": ctx.collector.total if ctx.collector else 0,
                    "per_worker": dict(ctx.collector.per_worker) if ctx.collector else {},
                },
            )
        except OSError:
            log.exception("could not write the status file %s", path)


def install(events: Any) -> None:
    """Register the hooks on Locust's event hub (idempotent: a process may load several
    locustfiles that each import this module)."""
    if getattr(events, "_kvscope_installed", False):
        return
    events._kvscope_installed = True
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stopping.add_listener(_on_test_stopping)
    events.test_stop.add_listener(_on_test_stop)
