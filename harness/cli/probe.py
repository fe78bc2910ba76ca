"""`kvscope probe`: measure what a request really costs in a server's KV pool, and how many
requests the pool then holds.

Import-light: argparse and the option declarations only; the probe, aiohttp and pandas are
imported by the handler.
"""

from __future__ import annotations

import argparse
import sys

from exporter.dialects.probe import KV_LAYOUTS
from harness.cli.load_flags import add_engine_flags, comma_list
from harness.probe.ladder import DEFAULT_MAX_KV_TOKENS
from harness.run.engine_flags import STARTUP_TIMEOUT_S
from harness.workload.options import API_KEY_ENV

PROBE_EPILOG = f"""\
examples:
  kvscope probe --num-blocks 64 --lengths 256,1024
  kvscope probe --target http://gpu-box:8000 --lengths-from runs/20250101-chat --out runs/probe1
  kvscope probe runs/20250101-chat            # no requests: the run's lengths and KV samples
  kvscope probe --simulate --sim-model llama-3.1-70b --sim-gpu h100-80gb --tensor-parallel-size 4 \\
      --max-model-len 32768 --lengths 2000

what it does (live): sends lone requests, one at a time, at a ladder of prompt lengths and of
output lengths (prompts of random token ids, so the prefix cache gives nothing; ignore_eos, so
the output is exactly max_tokens long), and reads the KV pool while each one is alive: the
server's KV usage on /metrics (vLLM's kv_cache_usage_perc and every dialect the exporter
knows), llama.cpp's /slots. It fits blocks per request = fixed + tokens / tokens-per-block
and states the residuals; measures the pool's usable blocks (usage moves in steps of one
block) and capacity in tokens; compares them with what the server states (vLLM's
cache_config_info, its start-up "maximum concurrency"; llama.cpp's n_ctx per slot); and
tabulates how many requests of each length the pool holds at once: at --lengths, at the
p50/p90/p99 of prompt + output of a run (--lengths-from), and at max_model_len.

The ladder stays within what one request may hold (max_model_len, 90% of the stated pool, a
llama.cpp slot, --max-kv-tokens) and takes a few seconds on a GPU server, a minute on a CPU.
Run it on an idle server: requests of other clients make a reading not the probe's own (the
probe says so, and leaves that point out).

from a bundle (BUNDLE, no requests sent): the run's request lengths and KV samples; blocks
per request are fitted to the tokens the run's requests held at each sample.

Whatever could not be measured (no KV metric, usage that counts cached blocks, a lone request
preempted) is said, with a stable code, in probe.json's findings; its figure stays null.

outputs (--out, default runs/<time>-probe; for a BUNDLE, the bundle's folder): probe.json
(tokens_per_block, fixed_blocks, capacity_tokens, stated_capacity_tokens and its source,
residuals, concurrency, findings with codes) and probe.md; the console prints the table.
Without --target the bundled engine starts with the engine flags below; the API key
(--api-key, --api-key-file or ${API_KEY_ENV}) goes to it and to the requests.
"""


def _lengths(text: str) -> list[int]:
    return comma_list(
        text, int, lambda v: v >= 2, "lengths are prompt + output tokens, at least 2, e.g. 512,2048"
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "probe",
        help="measure the KV a request really takes and the concurrency the pool holds",
        description="Measure tokens per block, the fixed blocks per request and the pool's real capacity "
        "in tokens with lone requests (or from a run's bundle), and tabulate how many requests of your "
        "lengths the pool holds at once, next to what the server states.",
        epilog=PROBE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "bundle", nargs="?", metavar="BUNDLE", help="a run's folder: probe it without sending requests"
    )
    p.add_argument(
        "--target", metavar="URL", help="an OpenAI-compatible server (default: the bundled engine)"
    )
    p.add_argument("--model", help="the bundled engine's --model; with --target, the model to request")
    p.add_argument("--out", metavar="DIR", help="where probe.json and probe.md go")
    p.add_argument(
        "--lengths", type=_lengths, metavar="N1,N2,...", help="prompt + output tokens per request to tabulate"
    )
    p.add_argument(
        "--lengths-from",
        metavar="BUNDLE",
        help="tabulate the p50, p90 and p99 of prompt + output of this run",
    )
    p.add_argument(
        "--max-kv-tokens",
        type=int,
        default=DEFAULT_MAX_KV_TOKENS,
        metavar="N",
        help=f"the longest ladder request, prompt + output (default {DEFAULT_MAX_KV_TOKENS})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompts (default 0)")
    p.add_argument(
        "--llamacpp-kv-layout",
        choices=KV_LAYOUTS,
        default="auto",
        help="llama.cpp: one pool for all slots (unified) or one per slot; auto infers it",
    )
    p.add_argument("--api-key", help="bearer token for the target (prefer --api-key-file)")
    p.add_argument("--api-key-file", metavar="PATH", help="a file whose first line is the bearer token")
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=STARTUP_TIMEOUT_S,
        metavar="S",
        help="seconds to wait for the engine",
    )
    add_engine_flags(p)
    p.set_defaults(func=_probe)


def _probe(args: argparse.Namespace) -> int:
    from harness.bundle.errors import BundleError
    from harness.run.probe_command import ProbeError, run_probe

    try:
        return run_probe(args, say=lambda m: print(f"kvscope probe: {m}", file=sys.stderr, flush=True))
    except (ProbeError, BundleError) as exc:
        print(f"kvscope probe: error: {exc}", file=sys.stderr)
        return 2
