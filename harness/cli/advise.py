"""`kvscope advise`: is the KV cache the bottleneck, and what should change?

    kvscope advise DIR                      a finished run's bundle: diagnosis, workload
                                            evidence, verdicts verified by replay; writes
                                            DIR/advice.json and the report's Advice section
                                            (DIR/advice.md when no report module exists)
    kvscope advise --live EXPORTER_URL      a running exporter's recent window: verdicts
                                            from its samples, no replay

For a --target run the advisor only knows what the bundle recorded; --model, --gpu, --tp,
--gpu-memory-utilization and --kv-cache-dtype describe the server so sizing and replays
can use the catalogue. Bad input (a missing bundle file, an unknown model or GPU) prints
one line on stderr and exits 2.
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
    t = p.add_argument_group("the served deployment (for --target runs, or to correct run.json)")
    t.add_argument("--model", help="catalogue model, e.g. llama-3.1-8b")
    t.add_argument("--gpu", help="catalogue GPU, e.g. h100-80gb")
    t.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, help="tensor-parallel size")
    t.add_argument("--gpu-memory-utilization", type=float)
    t.add_argument("--kv-cache-dtype", help="auto, fp8, int8, ...")
    t.add_argument("--max-model-len", type=int)
    t.add_argument("--max-num-seqs", type=int)
    p.set_defaults(func=run)


def _error(message: str) -> int:
    print(f"kvscope advise: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from harness.advisor.errors import AdvisorError
    from harness.bundle.errors import BundleError

    if bool(args.bundle) == bool(args.live):
        return _error("give a bundle folder DIR or --live EXPORTER_URL (one of them)")
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


def _bundle(args: argparse.Namespace) -> int:
    from dataclasses import replace
    from pathlib import Path

    from harness.advisor import run_inputs
    from harness.advisor.deployment import with_target_spec
    from harness.postprocess import advise_and_report

    inputs = run_inputs.load(args.bundle)
    spec = {
        k: getattr(args, k)
        for k in (
            "model",
            "gpu",
            "tp",
            "gpu_memory_utilization",
            "kv_cache_dtype",
            "max_model_len",
            "max_num_seqs",
        )
    }
    if any(v is not None for v in spec.values()):
        inputs = replace(inputs, deployment=with_target_spec(inputs.deployment, **spec))
    data = advise_and_report(args.bundle, inputs, replay=not args.no_replay)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(data["markdown"])
        print(f"\nwrote {Path(args.bundle) / 'advice.json'} and {Path(args.bundle) / 'report.html'}")
    return 0
