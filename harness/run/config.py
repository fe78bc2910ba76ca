"""`kvscope run`'s configuration as one typed record, built and checked before anything starts.

Everything a run does is decided here from the command line, so run.json can store the
whole configuration and a mistake (an unknown workload option, a replay without a trace,
engine flags that do not parse) fails in milliseconds rather than after the engine has
loaded. The checks `kvscope sweep` shares (workload options, engine flags, --target, the
default output folder) are the functions below `RunConfig`, used by both.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter.credentials import CredentialError, read_secret_file
from exporter.dialects.probe import KVLayout
from exporter.kv_events.spec import parse_sources
from exporter.units import parse_duration
from harness.bundle.deployment import DeploymentFacts
from harness.bundle.deployment_option import parse_deployment
from harness.run.deployment import bundled_facts
from harness.run.engine_flags import STARTUP_TIMEOUT_S, engine_argv
from harness.run.kv_events import AUTO, for_target
from harness.run.otlp_config import OtlpConfig, otlp_config
from harness.run.outcome import DEFAULT_MAX_ERROR_RATE
from harness.run.serve import ServeCommand, parse_serve
from harness.workload.conversations import load_conversations
from harness.workload.options import (
    API_KEY_ENV,
    DRAIN_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    SET_BY_RUN,
    WORKLOADS,
    options_for,
    run_options,
    to_argv,
)

CLOSED_LOOP_USERS = 8
OPEN_LOOP_USERS = 64
MASTER_HOST = "127.0.0.1"
RAMP_MAX_S = 10.0  # closed loop without --warmup: users start over a tenth of the run, at most this


class ConfigError(ValueError):
    """A run that cannot work as asked; the message says what to change."""


@dataclass(slots=True)
class RunConfig:
    """`deployment`: for the bundled engine, the configuration it will run with (from the
    same argv it is given); for --target None until the server states what it serves.
    `deployment_text`: the user's `--deployment` statement about a --target (checked here,
    recorded as facts at the end of the run)."""

    workload: str
    target: str | None
    users: int
    spawn_rate: float
    rate: float
    duration_s: float
    workers: int
    remote_workers: int
    master_host: str
    master_port: int | None  # None: pick a free port
    out: Path
    model: str | None
    workload_argv: list[str] = field(default_factory=list)
    engine_argv: list[str] = field(default_factory=list)
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    request_timeout_s: float = REQUEST_TIMEOUT_S
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    progress: bool = True
    api_key: str = ""
    deployment: DeploymentFacts | None = None
    deployment_text: str = ""
    seed: int = 0  # drawn per run unless --seed was given; forwarded in workload_argv
    warmup_s: float = 0.0
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    fail_on_unreliable: bool = False
    advise: bool = True
    # --kv-events: ["auto"] (the bundled engine's set up, a --target's asked of it), or a --target's endpoints
    kv_events: list[str] = field(default_factory=list)
    otlp: OtlpConfig | None = None  # --otlp: receive the server's request spans
    llamacpp_kv_layout: KVLayout = "auto"  # the exporter's --llamacpp-kv-layout (a llama-server target)
    serve: ServeCommand | None = None  # --serve: the server kvscope starts (its URL is `target`)

    @property
    def open_loop(self) -> bool:
        return self.rate > 0 or self.workload == "replay"

    def to_dict(self) -> dict[str, Any]:
        """run.json's `config` (the deployment facts have their own key there)."""
        d = asdict(self)
        d.pop("deployment")
        d["serve"] = self.serve.to_json() if self.serve else None
        d["out"] = str(self.out)
        if self.api_key:
            d["api_key"] = "<redacted>"
        d["workload_argv"] = redact(self.workload_argv)
        d["engine_argv"] = redact(self.engine_argv)
        return d


def redact(argv: list[str]) -> list[str]:
    return ["<redacted>" if i and argv[i - 1] == "--api-key" else a for i, a in enumerate(argv)]


def workload_argv(args: argparse.Namespace, workload: str) -> list[str]:
    """The workload's options the user gave, as flags; ConfigError for another workload's.
    Secret options (the API key) are left out: they travel in the environment."""
    own = {o.flag for o in options_for(workload)}
    foreign = {
        o.flag
        for o in run_options()
        if o.flag not in own and getattr(args, o.dest, None) not in (None, False)
    }
    if foreign:
        raise ConfigError(f"workload {workload!r} has no option(s) {', '.join(sorted(foreign))}")
    spread = getattr(args, "length_spread", None)
    if spread is not None and not 0 <= spread < 1:
        raise ConfigError(f"--length-spread must be in [0, 1), got {spread}")
    return to_argv(tuple(o for o in options_for(workload) if o.dest not in SET_BY_RUN and not o.secret), args)


def api_key(args: argparse.Namespace) -> str:
    """--api-key, else --api-key-file's first line, else $KVSCOPE_API_KEY ('' for none)."""
    given, path = getattr(args, "api_key", None), getattr(args, "api_key_file", None)
    if given and path:
        raise ConfigError("give --api-key or --api-key-file, not both")
    if path:
        try:
            return read_secret_file(path)
        except CredentialError as exc:
            raise ConfigError(f"--api-key-file: {exc}") from None
    return given or os.environ.get(API_KEY_ENV, "")


def share(text: str | None, flag: str, default: float) -> float:
    """A share of requests: `1%`, `0.01` or `0`; ConfigError naming the flag."""
    if text is None:
        return default
    body = text.strip()
    try:
        value = float(body[:-1]) / 100 if body.endswith("%") else float(body)
    except ValueError:
        raise ConfigError(f"{flag}: not a share, got {text!r} (e.g. 1% or 0.01)") from None
    if not 0 <= value <= 1:
        raise ConfigError(f"{flag}: a share must be between 0 and 1 (0% and 100%), got {text!r}")
    return value


def warmup(text: str | None) -> float:
    """--warmup as seconds (0 when not given or 0)."""
    if text is None or text.strip() in ("0", "0s"):
        return 0.0
    return duration(text, "--warmup")


def default_spawn_rate(users: int, open_loop: bool, warmup_s: float, duration_s: float) -> float:
    """Users started per second when --spawn-rate is not given. Open loop: all at once (they
    are only slots; the schedule decides when requests leave). Closed loop: staggered over
    the warm-up, else over a tenth of the run (1 to RAMP_MAX_S seconds), so users do not
    start, and then keep sending, in step."""
    if open_loop:
        return float(users)
    ramp = warmup_s if warmup_s > 0 else min(RAMP_MAX_S, max(1.0, duration_s / 10))
    return users / ramp


def bundled_engine_argv(args: argparse.Namespace) -> list[str]:
    """The engine flags given; ConfigError when they come with --target (they would be lost)."""
    argv = engine_argv(args)
    if args.target and argv:
        raise ConfigError(
            f"engine flags ({' '.join(argv)}) only apply to the bundled engine, not to --target"
        )
    return argv


def target_url(text: str | None) -> str | None:
    if text and not text.startswith(("http://", "https://")):
        raise ConfigError(f"--target must be an http(s) URL, got {text!r}")
    return text.rstrip("/") if text else None


def duration(text: str, flag: str) -> float:
    """A positive duration (`90s`, `5m`, `1h`, bare seconds); ConfigError naming the flag."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None
    if seconds <= 0:
        raise ConfigError(f"{flag}: a duration must be positive, got {text!r}")
    return seconds


def default_out(name: str) -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"


def kv_events(args: argparse.Namespace, engine_argv: list[str]) -> list[str]:
    """--kv-events, checked against the target: the bundled engine's are set up by kvscope
    (no value, or auto), a --target's are asked of it (auto, from vLLM 0.32) or given;
    ConfigError otherwise."""
    given = list(getattr(args, "kv_events", None) or [])
    if not given:
        return []
    if args.target:
        if AUTO in given:
            if given != [AUTO]:
                raise ConfigError(
                    "--kv-events auto asks the target where it publishes: give it alone, or give every "
                    "endpoint (tcp://HOST:PORT[,replay=tcp://HOST:PORT]) without auto"
                )
            return [AUTO]
        try:
            parse_sources(for_target("target", given))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return given
    if given != [AUTO]:
        raise ConfigError(
            "the bundled engine's KV events are set up by kvscope: give --kv-events without a value"
        )
    if "--kv-events-config" in engine_argv:
        raise ConfigError("give --kv-events or the engine's --kv-events-config, not both")
    if "--no-enable-prefix-caching" in engine_argv:
        raise ConfigError("KV cache events need the prefix cache: drop --no-enable-prefix-caching")
    return [AUTO]


def from_args(args: argparse.Namespace) -> RunConfig:
    workload = args.workload
    forwarded = workload_argv(args, workload)
    if workload == "replay" and not getattr(args, "trace", None):
        raise ConfigError("the replay workload needs --trace FILE")
    if workload == "multi_turn" and getattr(args, "dataset", None):
        try:  # here, not in every Locust worker after the engine has loaded
            load_conversations(args.dataset)
        except ValueError as exc:
            raise ConfigError(f"--dataset: {exc}") from None
    duration_s = duration(args.duration, "--duration")
    rate = float(args.rate) if args.rate is not None else float(WORKLOADS[workload].defaults.get("rate", 0.0))
    if rate < 0 or not math.isfinite(rate):
        raise ConfigError(f"--rate must be a positive number, got {args.rate}")
    open_loop = rate > 0 or workload == "replay"
    users = args.users if args.users is not None else (OPEN_LOOP_USERS if open_loop else CLOSED_LOOP_USERS)
    if users < 1 or args.workers < 0 or args.remote_workers < 0:
        raise ConfigError("--users must be at least 1, --workers and --remote-workers at least 0")
    if args.workers + args.remote_workers < 1:
        raise ConfigError("need at least one worker (--workers or --remote-workers)")
    request_timeout = float(args.request_timeout) if args.request_timeout is not None else REQUEST_TIMEOUT_S
    if not 0 < request_timeout < math.inf:
        raise ConfigError(
            f"--request-timeout must be a positive number of seconds, got {args.request_timeout}"
        )
    engine = bundled_engine_argv(args)
    target = target_url(args.target)
    serve = serve_command(getattr(args, "serve", None), target, engine)
    target = serve.url if serve else target
    if target and args.model:
        forwarded += ["--model", args.model]
    forwarded += ["--rate", str(rate)] if rate > 0 else []
    seed = args.seed if getattr(args, "seed", None) is not None else secrets.randbelow(1 << 31)
    if getattr(args, "seed", None) is None:
        forwarded += ["--seed", str(seed)]  # a new seed per run: a rerun must not hit a warm cache
    warmup_s = warmup(getattr(args, "warmup", None))
    host, port = args.master_bind or (MASTER_HOST, None)  # (host, port) from the command line
    out = Path(args.out) if args.out else default_out(workload)
    if (out / "run.json").exists() or (out / "raw").exists():
        raise ConfigError(f"{out} already holds a run; choose another --out (records would mix)")
    try:
        deployment = None if target else bundled_facts(args.model, engine)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    stated = deployment_statement(getattr(args, "deployment", None), target)
    layout = getattr(args, "llamacpp_kv_layout", "auto")
    if layout != "auto" and not target:
        raise ConfigError(
            "--llamacpp-kv-layout describes a llama-server --target; the bundled engine states its pool"
        )
    try:
        otlp = otlp_config(args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return RunConfig(
        workload=workload,
        target=target,
        users=users,
        spawn_rate=float(args.spawn_rate)
        if args.spawn_rate
        else default_spawn_rate(users, open_loop, warmup_s, duration_s),
        rate=rate,
        duration_s=duration_s,
        workers=args.workers,
        remote_workers=args.remote_workers,
        master_host=host,
        master_port=port,
        out=out,
        model=args.model,
        workload_argv=forwarded,
        engine_argv=engine,
        drain_timeout_s=float(args.drain_timeout or DRAIN_TIMEOUT_S),
        request_timeout_s=request_timeout,
        startup_timeout_s=args.startup_timeout,
        progress=not args.quiet,
        api_key=api_key(args),
        deployment=deployment,
        deployment_text=stated,
        seed=seed,
        warmup_s=warmup_s,
        max_error_rate=share(
            getattr(args, "max_error_rate", None), "--max-error-rate", DEFAULT_MAX_ERROR_RATE
        ),
        fail_on_unreliable=bool(getattr(args, "fail_on_unreliable", False)),
        advise=not getattr(args, "no_advise", False),
        kv_events=kv_events(argparse.Namespace(**{**vars(args), "target": target}), engine),
        otlp=otlp,
        llamacpp_kv_layout=layout,
        serve=serve,
    )


def serve_command(text: str | None, target: str | None, engine_argv: list[str]) -> ServeCommand | None:
    """--serve, parsed; ConfigError when it cannot work (engine flags would be lost)."""
    if text is None:
        return None
    if engine_argv:
        raise ConfigError(
            f"engine flags ({' '.join(engine_argv)}) apply to the bundled engine; with --serve put them "
            "in the command"
        )
    try:
        return parse_serve(text, target)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def deployment_statement(text: str | None, target: str | None) -> str:
    """The --deployment text, checked; ConfigError without --target (the bundled engine's
    configuration is known from its flags) or when it does not parse."""
    if not text:
        return ""
    if not target:
        raise ConfigError(
            "--deployment describes a --target server; the bundled engine's configuration is recorded "
            "from its own flags"
        )
    try:
        parse_deployment(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return text
