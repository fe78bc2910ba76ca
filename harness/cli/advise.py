"""`kvscope advise`: is the KV cache the bottleneck, and what should change?

    kvscope advise DIR                      a finished run's bundle: diagnosis, workload
                                            evidence, verdicts verified by replay; writes
                                            DIR/advice.json and the report's Advice section
                                            (DIR/advice.md when no report module exists)
    kvscope advise --live EXPORTER_URL      a running exporter's recent window: verdicts
                                            from its samples, no replay

For a --target run the advisor only knows what the bundle recorded (what the server and the
user stated); `--deployment KEY=VALUE,...` adds what you know about the server, as in
`kvscope run --deployment` (--model, --gpu, --tp, --gpu-memory-utilization, --kv-cache-dtype,
--max-model-len and --max-num-seqs are the same statements one at a time). A verdict or
replay that needs a fact nobody stated is not made; the advice names the fact and the
`--deployment` key that supplies it. Bad input (a missing bundle file, an unknown model or
GPU, a bad key) prints one line on stderr and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from exporter.units import duration


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "advise",
        help="diagnose KV-cache pressure and advise (quantize, cut context, add memory, ...)",
        description="Diagnose a run (or a live exporter) and say what to change, with evidence; on a bundle, "
        "each verdict is replayed on the simulator and marked verified only when the replay confirms it.",
    )
    p.add_argument("bundle", nargs="?", metavar="DIR", help="a results bundle folder from `kvscope run`")
    p.add_argument(
        "--live", metavar="EXPORTER_URL", help="advise from a running exporter's /api/v1/samples instead"
    )
    p.add_argument(
        "--window",
        type=duration,
        default="5m",
        metavar="DURATION",
        help="with --live: how far back to look (default 5m)",
    )
    p.add_argument(
        "--no-replay", action="store_true", help="skip the what-if replays (verdicts stay unverified)"
    )
    p.add_argument("--json", action="store_true", help="print advice.json's content instead of Markdown")
    p.add_argument(
        "--verify",
        action="store_true",
        help="prove the advice on the server: rerun the unchanged configuration once (the noise), then "
        "restart the server with each verdict's change as its own flags and rerun the same workload (same "
        "seed, users, duration); each verdict gets a `check` in advice.json (predicted against measured). "
        "Only for a bundle whose server kvscope started (the bundled engine, or `kvscope run --serve`); "
        "takes one run's time per change, plus one",
    )
    p.add_argument(
        "--verify-only",
        metavar="ACTION,...",
        help="--verify with only these verdicts (e.g. add_memory); the others are not rerun",
    )
    t = p.add_argument_group("the served deployment (for --target runs, or to correct run.json)")
    t.add_argument(
        "--deployment",
        metavar="KEY=VALUE,...",
        help="facts about the server, e.g. model=llama-3.1-8b,gpu=h100-80gb,tp=1,kv-cache-dtype=auto,"
        "num-gpu-blocks=9518,max-num-seqs=256,max-num-batched-tokens=8192 (see `kvscope run --help`)",
    )
    t.add_argument("--model", help="catalogue model, e.g. llama-3.1-8b")
    t.add_argument("--gpu", help="catalogue GPU, e.g. h100-80gb")
    t.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, help="tensor-parallel size")
    t.add_argument("--gpu-memory-utilization", type=float)
    t.add_argument("--kv-cache-dtype", help="auto, fp8, int8, ...")
    t.add_argument("--max-model-len", type=int)
    t.add_argument("--max-num-seqs", type=int)
    p.set_defaults(func=run)


SHORT_FLAGS = (
    ("model", "model"),
    ("gpu", "gpu"),
    ("tp", "tp"),
    ("gpu_memory_utilization", "gpu-memory-utilization"),
    ("kv_cache_dtype", "kv-cache-dtype"),
    ("max_model_len", "max-model-len"),
    ("max_num_seqs", "max-num-seqs"),
)


def deployment_text(args: argparse.Namespace) -> str:
    """--deployment with the one-at-a-time flags appended (they are the same statements)."""
    parts = [args.deployment] if args.deployment else []
    parts += [f"{key}={getattr(args, dest)}" for dest, key in SHORT_FLAGS if getattr(args, dest) is not None]
    return ",".join(parts)


def _error(message: str) -> int:
    print(f"kvscope advise: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from harness.advisor.errors import AdvisorError
    from harness.bundle.errors import BundleError

    if bool(args.bundle) == bool(args.live):
        return _error("give a bundle folder DIR or --live EXPORTER_URL (one of them)")
    if args.verify_only:
        args.verify = True
    if args.verify and (args.live or args.no_replay):
        return _error("--verify needs a bundle folder and its replays (not --live, not --no-replay)")
    try:
        return _live(args) if args.live else _bundle(args)
    except (AdvisorError, BundleError) as exc:
        return _error(str(exc))


def _live(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from harness.advisor.live import live_advice, render_live

    results = live_advice(args.live, args.window)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "diagnosis": d.numbers()
                        | {
                            "target": d.target,
                            "model": d.model,
                            "instance": d.instance,
                            "preemption_level": d.preemption_level,
                            "kv_pressure": d.kv_pressure,
                        },
                        "verdicts": [asdict(v) for v in vs],
                    }
                    for d, vs in results
                ],
                indent=2,
                default=str,
            )
        )
    else:
        sys.stdout.write(render_live(results))
    return 0


def verify_bundle(folder, only: str | None = None) -> int:
    """The verify loop on a folder: 0 when it ran, 2 when the folder's server cannot be restarted
    by kvscope, 130 when interrupted."""
    from harness.verify.loop import verify
    from harness.verify.rerun import NotRerunnable

    try:
        advice = verify(folder, frozenset(only.split(",")) if only else None)
    except NotRerunnable as exc:
        return _error(f"--verify: {exc}")
    print(f"wrote the checks into {folder / 'advice.json'} and {folder / 'report.html'}")
    from harness.bundle.finding import codes

    return 130 if "verify_interrupted" in codes(advice.get("notes")) else 0


def _bundle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.advisor import run_inputs
    from harness.advisor.errors import AdvisorError
    from harness.bundle.deployment_option import parse_deployment
    from harness.postprocess import advise_and_report

    try:
        stated = parse_deployment(deployment_text(args))
    except ValueError as exc:
        raise AdvisorError(str(exc)) from None
    inputs = run_inputs.load(args.bundle, stated)
    data = advise_and_report(args.bundle, inputs, replay=not args.no_replay)
    if args.verify:
        return verify_bundle(Path(args.bundle), args.verify_only)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(data["markdown"])
        print(f"\nwrote {Path(args.bundle) / 'advice.json'} and {Path(args.bundle) / 'report.html'}")
    return 0
