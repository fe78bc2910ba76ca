"""`kvscope run`: target -> exporter -> Locust (master + workers) -> progress -> bundle.

Order matters at both ends. Start: the target must answer before anything measures it
(an unreachable --target fails within seconds, before Locust starts). Stop — normal end or
Ctrl-C alike: Locust first (SIGTERM: it drains in-flight requests and the workers' last
records reach the master), then one more exporter scrape so the server's counters include
the last requests, then the exporter, then the engine. The bundle is written whatever
happened, from what reached disk (`finish`); run.json says how the run ended. A
configuration error exits 2 before anything starts. A target that stops answering during
the load (`liveness`: requests fail on the connection and a probe gets no HTTP answer)
stops Locust at once, so the run ends within seconds (exit 4).

A second Ctrl-C stops at once: the master is told (SIGUSR1) to have every worker end its
in-flight requests now, record them as aborted and send every record; the master writes
what it received and exits, and whatever is still running ABORT_GRACE_S later is killed.
Records that reached the master are on disk by then (it flushes every batch it receives).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from harness.bundle.finding import Finding
from harness.run import kv_events, otlp, procs
from harness.run.commands import (
    LOOPBACK,
    child_env,
    connect_host,
    engine_command,
    exporter_command,
    master_command,
    target_name,
    worker_command,
)
from harness.run.config import ConfigError, RunConfig, from_args
from harness.run.finish import finish
from harness.run.kv_watch import KvEventsWatch
from harness.run.kv_watch import fetch as fetch_kv_events
from harness.run.liveness import TargetWatch, engine_exited, reach, record_lost_target
from harness.run.outcome import Exit
from harness.run.progress import JsonlTail, Progress
from harness.run.serve import ServeCommand
from harness.run.served import start_served
from harness.run.server_facts import target_facts
from harness.run.state import Run, RunFailed

REACH_TIMEOUT_S = 4.0  # per probe of a --target; two probes keep an unreachable target under 10 s
END_PROBE_TIMEOUT_S = 3.0  # after the load: does the target still answer?
PROGRESS_EVERY_S = 2.0
ABORT_SIGNAL = signal.SIGUSR1  # the Locust master's "stop at once" (harness.load.context)
ABORT_GRACE_S = 1.5  # after a second Ctrl-C, children still running this long after are killed
SERVER_STOP_S = 20.0  # a server still up this long after SIGTERM to its process group is killed


def run_from_args(args: argparse.Namespace) -> int:
    try:
        cfg = from_args(args)
    except ConfigError as exc:
        print(f"kvscope run: error: {exc}", file=sys.stderr)
        print(
            f"kvscope run: exit {int(Exit.CONFIG_ERROR)} (config_error): nothing was started", file=sys.stderr
        )
        return int(Exit.CONFIG_ERROR)
    return execute(cfg)


def execute(cfg: RunConfig) -> int:
    run = Run(cfg)
    for key in ("logs", "raw", "exporter"):
        run.paths[key].mkdir(parents=True, exist_ok=True)
    run.paths["csv"].parent.mkdir(parents=True, exist_ok=True)
    # SIGTERM (a CI timeout, `kill`) gets the same orderly stop as Ctrl-C: the children live
    # in their own sessions and would otherwise outlive this process.
    previous = {sig: signal.signal(sig, run.on_sigint) for sig in (signal.SIGINT, signal.SIGTERM)}
    failure: RunFailed | None = None
    try:
        otlp.start_receiver(run)
        start_target(run)
        run.models = server_models(run.target_url)
        if cfg.target:
            run.stated = target_facts(run.target_url, run.models, cfg.model, procs.http_get)
        start_exporter(run)
        start_locust(run)
        watch(run)
        if not run.interrupts and run.target_answers:
            run.target_answers = target_answers(run.target_url)
    except RunFailed as exc:
        failure = exc
        run.say(f"error: {exc}")
    finally:
        master_rc = stop_all(run)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return finish(run, failure, master_rc)


def target_answers(url: str) -> bool:
    """After the load: a target that no longer answers was lost during the run."""
    return reach(url, END_PROBE_TIMEOUT_S) is None


def start_target(run: Run) -> None:
    cfg = run.cfg
    if cfg.kv_events:
        run.kv_watch = KvEventsWatch(None)
    if cfg.serve:  # then a --target like any other: its URL is the served one
        start_served(run, cfg.serve)
    if cfg.target:
        reason = reach(cfg.target, REACH_TIMEOUT_S)
        if reason is not None:
            raise RunFailed(f"cannot reach the target {cfg.target}: {reason}", code=Exit.TARGET_UNREACHABLE)
        run.target_url = cfg.target
        subscribe_target(run)
        return
    port = procs.free_port()
    run.say(f"starting the bundled engine ({cfg.model or 'its default model'}) on 127.0.0.1:{port}")
    flags = cfg.engine_argv
    if cfg.kv_events:
        extra, run.kv_events = kv_events.bundled(target_name(cfg))
        flags = [*flags, *extra]
    argv = engine_command(cfg.model, flags + otlp.engine_flags(run), port)
    run.serve = ServeCommand(tuple(argv), "bundled", LOOPBACK, port, "chosen")
    child = run.children["engine"] = procs.start(
        "engine", argv, run.paths["logs"], env=otlp.engine_env(run, child_env(cfg.api_key))
    )
    ok, reason = procs.wait_http(
        f"http://127.0.0.1:{port}/health",
        cfg.startup_timeout_s,
        child,
        ok=lambda s: s == 200 or run.interrupts > 0,
    )
    if run.interrupts:
        raise RunFailed("interrupted while the engine was starting", code=Exit.INTERRUPTED)
    if not ok:
        raise RunFailed(
            f"the engine did not become healthy ({reason}); last lines of its log:\n{child.log_tail()}"
        )
    run.target_url = f"http://127.0.0.1:{port}"


def subscribe_target(run: Run) -> None:
    """A --target's KV events; what auto found is said now, before the load."""
    watch, cfg = run.kv_watch, run.cfg
    if watch is None:
        return
    run.kv_events, notes, watch.stated = kv_events.subscribe(target_name(cfg), run.target_url, cfg.kv_events)
    watch.notes += notes
    for note in notes:
        run.say(f"kv events: {note['text']} [{note['code']}]")
    if cfg.kv_events == [kv_events.AUTO]:
        run.say(f"kv events: subscribing {', '.join(run.kv_events) or 'to nothing'}")


def server_models(url: str) -> list[dict]:
    """What the target serves (id, max_model_len), for run.json; best effort (an API key
    on /v1 makes this empty)."""
    status, body = procs.http_get(url + "/v1/models", 3.0)
    try:
        cards = json.loads(body).get("data") or [] if status == 200 else []
    except (ValueError, AttributeError):
        cards = []
    return [{k: c.get(k) for k in ("id", "max_model_len", "root")} for c in cards if isinstance(c, dict)]


def start_exporter(run: Run) -> None:
    """Start it and move on: it comes up while Locust starts (both take seconds), and
    `check_exporter` confirms it from the watch loop."""
    port = procs.free_port()
    argv = exporter_command(run.cfg, run.target_url, port, run.paths["exporter"], run.kv_events)
    run.children["exporter"] = procs.start("exporter", argv, run.paths["logs"])
    run.exporter_url = f"http://127.0.0.1:{port}"
    if run.kv_watch is not None:
        run.kv_watch.exporter_url = run.exporter_url if run.kv_events else None
        run.kv_watch.subscriptions = list(run.kv_events)


def check_exporter(run: Run, deadline: float) -> None:
    """Once healthy, stop checking; past `deadline` (or if it died), say so once."""
    child = run.children.get("exporter")
    if child is None or run.exporter_ok is not None:
        return
    if procs.http_get(f"{run.exporter_url}/healthz", 0.3)[0] == 200:
        run.exporter_ok = True
    elif not child.running or time.monotonic() > deadline:
        run.exporter_ok = False
        run.notes.append(
            Finding(
                "exporter_down",
                "the exporter did not come up; server.parquet has no samples (see logs/exporter.log)",
            )
        )
        run.say(f"warning: {run.notes[-1].text}\n{child.log_tail(5)}")


def start_locust(run: Run) -> None:
    cfg, paths = run.cfg, run.paths
    run.master_port = cfg.master_port or procs.free_port(connect_host(cfg.master_host))
    argv = master_command(
        cfg, run.target_url, run.master_port, paths["records"], paths["status"], paths["csv"]
    )
    env = child_env(cfg.api_key)
    run.children["master"] = procs.start("locust-master", argv, paths["logs"], env=env)
    for i in range(cfg.workers):
        run.children[f"worker{i}"] = procs.start(
            f"locust-worker{i}",
            worker_command(cfg.workload, cfg.master_host, run.master_port),
            paths["logs"],
            env=env,
        )
    if cfg.remote_workers:
        run.say(
            f"waiting for {cfg.remote_workers} remote worker(s): "
            f"kvscope worker --master <this host>:{run.master_port}"
        )
    run.say(
        f"{cfg.workload}: {f'rate {cfg.rate:.3g}/s, ' if cfg.rate else ''}{cfg.users} users, "
        f"{cfg.duration_s:.0f}s, {cfg.workers} local worker(s) -> {run.target_url}"
    )


def watch(run: Run) -> None:
    """Progress until the master exits; Ctrl-C asks it to drain, a second Ctrl-C to stop at once."""
    cfg, master = run.cfg, run.children["master"]
    progress = Progress(
        JsonlTail(run.paths["records"]), run.paths["status"], run.paths["exporter"], warmup_s=cfg.warmup_s
    )
    hard_deadline = (
        time.monotonic() + cfg.warmup_s + cfg.duration_s + cfg.drain_timeout_s + 180.0
    )  # startup + drain + slack
    term_deadline: float | None = None
    exporter_deadline = time.monotonic() + 30.0
    workers_gone_at: float | None = None
    last = 0.0
    tty = sys.stderr.isatty()
    target = TargetWatch(run.target_url)
    while master.running:
        now = time.monotonic()
        progress.update()
        if target.check(progress.connection_failures, now, engine_exited(run)) and target.lost:
            record_lost_target(run, target.lost)
            if term_deadline is None:
                master.send_signal(signal.SIGTERM)
                term_deadline = now + cfg.drain_timeout_s + 20.0
        if run.kv_watch is not None and run.target_answers:
            run.kv_watch.poll(now, progress.first_ok_unix, run.say)
        if run.interrupts and term_deadline is None:
            master.send_signal(signal.SIGTERM)
            term_deadline = now + cfg.drain_timeout_s + 20.0
        # Workers exit right after the master tells them to quit, and the master follows
        # within a second or two; a master still up 15 s after its last local worker died
        # has lost its workers (crashed) and is told to stop.
        locals_gone = (
            cfg.workers
            and not cfg.remote_workers
            and all(not c.running for n, c in run.children.items() if n.startswith("worker"))
        )
        workers_gone_at = (workers_gone_at or now) if locals_gone else None
        if workers_gone_at and now - workers_gone_at > 15.0 and term_deadline is None:
            run.notes.append(
                Finding(
                    "workers_lost",
                    "the local workers exited but the master did not; see logs/locust-worker*.log",
                )
            )
            master.send_signal(signal.SIGTERM)
            term_deadline = now + 20.0
        if run.interrupts > 1 and run.aborted_at is None:
            run.aborted_at = now
            master.send_signal(ABORT_SIGNAL)
        if run.aborted_at is not None and now - run.aborted_at > ABORT_GRACE_S:
            run.notes.append(
                Finding(
                    "locust_killed_after_abort",
                    f"Locust was killed {ABORT_GRACE_S:g} s after the second Ctrl-C",
                )
            )
            master.send_signal(signal.SIGKILL)
            break
        if now > hard_deadline or (term_deadline and now > term_deadline):
            run.notes.append(Finding("locust_killed_late", "Locust was killed (did not stop in time)"))
            master.send_signal(signal.SIGKILL)
            break
        check_exporter(run, exporter_deadline)
        if cfg.progress and now - last >= PROGRESS_EVERY_S:
            last = now
            print(
                ("\r" if tty else "") + progress.line(), end="" if tty else "\n", file=sys.stderr, flush=True
            )
        time.sleep(0.1)
    if cfg.progress:
        final = progress.final_line()  # None: nothing new since the line last printed
        if tty or final is not None:
            print(("\r" if tty else "") + (final or progress.last_line), file=sys.stderr, flush=True)


def stop_all(run: Run) -> int | None:
    if run.aborted_at is not None:
        return stop_at_once(run)
    master = run.children.get("master")
    master_rc = master.stop(signal.SIGTERM, timeout_s=run.cfg.drain_timeout_s + 20.0) if master else None
    for name, child in run.children.items():
        if name.startswith("worker"):
            child.wait(10.0)
            child.stop(signal.SIGTERM, timeout_s=5.0)
    otlp.wait_for_spans(run)
    exporter = run.children.get("exporter")
    if exporter is not None:
        if exporter.running and run.exporter_ok and run.target_answers:
            time.sleep(1.5)  # one more scrape: the server's counters after the last request
        if run.kv_watch is not None:
            run.kv_events_status = run.kv_watch.final(fetch_kv_events(run.kv_watch.exporter_url))
        exporter.stop(signal.SIGTERM, timeout_s=10.0)
    for name in ("engine", "server"):
        if (server := run.children.get(name)) is not None:
            server.stop(signal.SIGTERM, timeout_s=SERVER_STOP_S)
            server.reap_group()
    otlp.stop_receiver(run)
    return master_rc


def stop_at_once(run: Run) -> int | None:
    """After a second Ctrl-C: every child gets SIGTERM together (the master has already been
    told to stop at once), and what is still running ABORT_GRACE_S after the second Ctrl-C
    is killed; no final scrape."""
    master = run.children.get("master")
    for child in run.children.values():
        if child is not master:
            child.send_signal(signal.SIGTERM)
    deadline = (run.aborted_at or time.monotonic()) + ABORT_GRACE_S
    for child in run.children.values():
        child.wait(max(0.0, deadline - time.monotonic()))
        child.stop(signal.SIGKILL, timeout_s=1.0)
        child.reap_group()
    run.notes.append(
        Finding(
            "stopped_at_once",
            f"stopped at once after a second Ctrl-C: children gone "
            f"{time.monotonic() - (run.aborted_at or time.monotonic()):.1f} s after it",
        )
    )
    return master.returncode if master else None
