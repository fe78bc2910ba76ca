"""Every workload's options, as data: one source for `locust -f` and for `kvscope run`.

Locust-free on purpose: `kvscope run` must build its `--help` without importing Locust
(which monkey-patches the process with gevent). The locustfiles register the same specs
as Locust custom arguments (`events.init_command_line_parser`), so `locust -f
loadtests/NAME.py --prefix-tokens 512` and `kvscope run --workload NAME --prefix-tokens 512`
mean the same thing. A Locust master forwards custom arguments to its workers.

Each spec names its locustfile, `loadtests/NAME.py`: the `loadtests` package is installed
next to `harness` (pyproject's package list), so the path is known without importing it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from harness.workload.arrivals import ArrivalKind
from harness.workload.distribution import at_least
from harness.workload.record import Endpoint

LOADTESTS = Path(__file__).resolve().parents[2] / "loadtests"
REQUEST_TIMEOUT_S = 300.0  # without a byte from the server, a request has timed out
DRAIN_TIMEOUT_S = 30.0  # at the end, how long in-flight requests may finish
API_KEY_ENV = "KVSCOPE_API_KEY"  # the bearer token, as the bundled engine also reads it
LENGTH_SPREAD = 0.25  # default relative spread of drawn lengths (see `lengths.spread`)
# Options `kvscope run` sets itself: its own --model, --rate and --warmup, and where the master writes.
SET_BY_RUN = frozenset({"records_out", "status_out", "model", "rate", "warmup_s"})


@dataclass(frozen=True, slots=True)
class Option:
    flag: str
    type: Callable[[str], Any] | None = str  # None: a store_true switch
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None
    secret: bool = False  # masked in Locust's web UI and redacted in run.json

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    name: str
    summary: str
    options: tuple[Option, ...] = ()
    defaults: dict[str, Any] = field(default_factory=dict)  # overrides of COMMON defaults (by dest)
    shaped: bool = False  # drives its own user count (LoadTestShape): --users is ignored
    shares: bool = False  # requests are meant to share prompt prefixes (cache hits are expected)

    @property
    def locustfile(self) -> Path:
        return LOADTESTS / f"{self.name}.py"


SPREAD = Option(
    "--length-spread",
    float,
    LENGTH_SPREAD,
    "relative spread of each request's lengths: drawn uniformly within +-SPREAD of the mean "
    "(0: every request the same length, which makes closed-loop users move in lock-step)",
)


def _lengths(prompt: int, output: int) -> tuple[Option, Option, Option]:
    return (
        Option("--prompt-tokens", int, prompt, "mean prompt length in tokens, as the server counts them"),
        Option("--output-tokens", int, output, "mean tokens to generate per request (max_tokens)"),
        SPREAD,
    )


SESSIONS = Option(
    "--sessions",
    int,
    0,
    "end the run once this many sessions have ended, across all workers (0: run for the duration; "
    "the duration stays the upper bound)",
)
DIST = "V, A-B (uniform), exp:MEAN or lognormal:MEAN,SIGMA"


def _answer_tokens(default: str) -> Option:
    return Option(
        "--answer-tokens", at_least(1), default, f"tokens to ask for per answer (max_tokens): {DIST}"
    )


COMMON: tuple[Option, ...] = (
    Option(
        "--endpoint",
        str,
        "chat",
        "OpenAI endpoint: /v1/chat/completions or /v1/completions",
        get_args(Endpoint),
    ),
    Option("--model", str, "", "model name to send (default: the first one /v1/models lists)"),
    Option(
        "--api-key",
        str,
        "",
        f"bearer token for the server's /v1 API (default: ${API_KEY_ENV}; the environment keeps it "
        "off command lines, where `ps` shows it)",
        secret=True,
    ),
    Option("--temperature", float, 0.0, "sampling temperature"),
    Option(
        "--no-ignore-eos",
        None,
        False,
        "let the model stop at EOS (default: ask for ignore_eos so output lengths are as targeted)",
    ),
    Option(
        "--seed",
        int,
        0,
        "seed for prompt text, lengths and arrivals (same seed, same workload); `kvscope run` draws "
        "a new one per run unless given, and records it in run.json",
    ),
    Option(
        "--rate",
        float,
        0.0,
        "open loop: requests per second in total, independent of responses "
        "(0: closed loop, each user sends when its last answer is in)",
    ),
    Option("--arrival", str, "poisson", "open-loop arrival process", get_args(ArrivalKind)),
    Option("--think-time", float, 0.0, "closed loop: seconds a user waits between requests"),
    Option(
        "--request-timeout",
        float,
        REQUEST_TIMEOUT_S,
        "seconds without a byte from the server before a request counts as timed out",
    ),
    Option(
        "--drain-timeout",
        float,
        DRAIN_TIMEOUT_S,
        "at the end, seconds to let in-flight requests finish (they are recorded; new ones are not "
        "sent); any still running then are ended and recorded as failed, error class 'aborted'",
    ),
    Option(
        "--no-traceparent",
        None,
        False,
        "send no W3C traceparent header (by default every request carries one with a fresh trace id, "
        "recorded as trace_id, so the server's OTLP span can be joined to it)",
    ),
    Option(
        "--no-calibrate",
        None,
        False,
        "skip the two probe requests that measure tokens per word (then 1 word = 1 token)",
    ),
    Option(
        "--warmup-s",
        float,
        0.0,
        "requests sent in the first SECONDS of load are recorded as phase 'warmup' and kept out of "
        "every statistic",
    ),
    Option("--records-out", str, "", "master: append every request record to this JSON-lines file"),
    Option(
        "--status-out",
        str,
        "",
        "master: keep a small JSON status file here (users, workers, records), rewritten every second",
    ),
)

WORKLOADS: dict[str, WorkloadSpec] = {
    spec.name: spec
    for spec in (
        WorkloadSpec(
            "chat",
            "ShareGPT-like chat: lengths from the vLLM paper's ShareGPT statistics, "
            "or from a ShareGPT JSON file",
            (
                Option(
                    "--dataset", str, "", "ShareGPT-format JSON file to take (prompt, output) lengths from"
                ),
                Option("--max-prompt-tokens", int, 1024, "cap on drawn prompt lengths"),
                Option("--max-output-tokens", int, 1024, "cap on drawn output lengths"),
            ),
        ),
        WorkloadSpec(
            "shared_prefix",
            "K system prompts of P tokens shared across users, each request with its own user turn",
            (
                Option("--num-prefixes", int, 4, "number of distinct shared system prompts (K)"),
                Option("--prefix-tokens", int, 256, "tokens per shared system prompt (P)"),
                Option("--suffix-tokens", int, 32, "mean tokens of the varying user turn"),
                Option("--output-tokens", int, 64, "mean tokens to generate per request"),
                SPREAD,
            ),
            shares=True,
        ),
        WorkloadSpec(
            "long_context", "long prompts, short answers: prefill- and KV-capacity-bound", _lengths(3000, 64)
        ),
        WorkloadSpec(
            "parallel_sampling",
            "n completions per prompt (n = k), which share the prompt's KV blocks",
            (
                Option("--n", int, 4, "completions per request (OpenAI `n`)"),
                *_lengths(256, 128),
            ),
            shares=True,
        ),
        WorkloadSpec(
            "bursty",
            "step-and-spike user counts (a Locust LoadTestShape)",
            (
                Option("--base-users", int, 4, "users between spikes, first period"),
                Option("--step-users", int, 2, "users added to the base every period (the step)"),
                Option("--spike-users", int, 24, "users during a spike"),
                Option("--period-s", float, 20.0, "seconds per period (calm phase + spike)"),
                Option("--spike-s", float, 5.0, "seconds of spike at the end of each period"),
                *_lengths(256, 64),
            ),
            shaped=True,
        ),
        WorkloadSpec(
            "rate",
            "open-loop arrivals at a target request rate (Poisson or constant)",
            _lengths(256, 128),
            defaults={"rate": 2.0},
        ),
        WorkloadSpec(
            "replay",
            "replay a trace of arrival times and prompt/output lengths (JSON lines, Mooncake, Azure CSV)",
            (
                Option(
                    "--trace",
                    str,
                    "",
                    "trace file: JSON lines (arrival_s|timestamp ms, prompt_tokens|input_length, "
                    "output_tokens|output_length, optional Mooncake hash_ids of shared 512-token blocks) "
                    "or the Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens)",
                ),
                Option(
                    "--time-scale", float, 1.0, "multiply trace times by this (0.5 replays twice as fast)"
                ),
            ),
            shares=True,
        ),
        WorkloadSpec(
            "multi_turn",
            "chat sessions: each turn re-sends the whole conversation (system prompt, earlier turns and "
            "the server's answers) plus a new user message",
            (
                SESSIONS,
                Option("--turns", at_least(1), "4", f"turns per session: {DIST}"),
                Option("--user-tokens", at_least(1), "lognormal:64,0.8", f"tokens per user message: {DIST}"),
                _answer_tokens("lognormal:200,0.6"),
                Option("--system-tokens", int, 256, "tokens of the system prompt (0: none)"),
                Option(
                    "--system-prompts",
                    int,
                    1,
                    "distinct system prompts the sessions share (1: all share one; 0: each session its own)",
                ),
                Option(
                    "--turn-think-time",
                    at_least(0),
                    "1-3",
                    f"seconds between an answer and the session's next message: {DIST} "
                    "(--think-time is the pause between one session and the next)",
                ),
                Option(
                    "--dataset",
                    str,
                    "",
                    "ShareGPT-format JSON file: each session replays one conversation's human turns in order "
                    "(the answers come from the server; their recorded lengths set max_tokens)",
                ),
            ),
            shares=True,
        ),
        WorkloadSpec(
            "agentic",
            "agent loops: a long shared tool and system preamble, then many short calls, each appending "
            "a tool result of a few hundred tokens to the growing context, with no think time",
            (
                SESSIONS,
                Option("--steps", at_least(1), "8-16", f"calls per session: {DIST}"),
                Option(
                    "--preamble-tokens",
                    int,
                    2048,
                    "tokens of the tool and system preamble all sessions share",
                ),
                Option(
                    "--task-tokens",
                    at_least(1),
                    "64",
                    f"tokens of the task message that opens a session: {DIST}",
                ),
                Option("--tool-tokens", at_least(1), "lognormal:300,0.5", f"tokens per tool result: {DIST}"),
                _answer_tokens("16-48"),
                Option(
                    "--tool-role",
                    str,
                    "tool",
                    "role of the tool-result messages (user: for chat templates that reject the tool role)",
                    ("tool", "user"),
                ),
            ),
            shares=True,
        ),
    )
}


def options_for(workload: str) -> tuple[Option, ...]:
    """COMMON then the workload's own options, COMMON defaults overridden per workload."""
    spec = WORKLOADS[workload]
    common = tuple(
        Option(o.flag, o.type, spec.defaults.get(o.dest, o.default), o.help, o.choices, o.secret)
        for o in COMMON
    )
    return common + spec.options


def run_options() -> tuple[Option, ...]:
    """Every workload option `kvscope run` and `kvscope sweep` take and forward, once each
    (COMMON first), minus those kvscope run sets itself."""
    seen: dict[str, Option] = {}
    for o in (*COMMON, *(o for spec in WORKLOADS.values() for o in spec.options)):
        if o.dest not in SET_BY_RUN and o.flag not in seen:
            seen[o.flag] = o
    return tuple(seen.values())


def workloads_with(flag: str) -> list[str]:
    """The workloads that have `flag` among their own options (COMMON ones: none)."""
    return [s.name for s in WORKLOADS.values() if any(o.flag == flag for o in s.options)]


def add_to_parser(
    parser: Any, options: tuple[Option, ...], defaults: bool = True, locust: bool = False
) -> None:
    """Add options to an argparse-compatible parser (Locust's is configargparse).

    Skips flags the parser already has, so two locustfiles loaded in one process do not
    collide. `defaults=False` gives every option default None, so a caller can tell "given"
    from "not given" (kvscope run forwards only what the user set).
    """
    existing = getattr(parser, "_option_string_actions", {})
    for o in options:
        if o.flag in existing:
            continue
        extra = {"is_secret": True} if locust and o.secret else {}
        if o.type is None:
            parser.add_argument(
                o.flag, action="store_true", default=o.default if defaults else None, help=o.help, **extra
            )
        else:
            parser.add_argument(
                o.flag,
                type=o.type,
                default=o.default if defaults else None,
                choices=o.choices,
                help=f"{o.help} (default: {o.default!r})" if defaults else o.help,
                **extra,
            )


def to_argv(options: tuple[Option, ...], values: argparse.Namespace) -> list[str]:
    """Command-line flags for the options in `values` that are not None (set by the user)."""
    argv: list[str] = []
    for o in options:
        value = getattr(values, o.dest, None)
        if value is None or value is False:
            continue
        argv += [o.flag] if o.type is None else [o.flag, str(value)]
    return argv
