"""`kvscope probe`'s handler: check the command line as `kvscope run` does, start the bundled
engine when there is no --target (and stop it after), probe live or read a bundle, write
probe.json and probe.md, print the table.

Exit status: 0 when the pool's capacity was measured, 1 when it could not be (probe.json's
findings say why), 2 for a bad command line or an unreadable bundle.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path

from harness.probe.from_bundle import probe_bundle, run_lengths
from harness.probe.live import LiveSettings, probe_live
from harness.probe.render import console, markdown
from harness.probe.result import ProbeResult, write_result
from harness.run.bundled_engine import start_bundled_engine
from harness.run.config import ConfigError, api_key, bundled_engine_argv, default_out, target_url


class ProbeError(Exception):
    """A command line the probe cannot act on."""


def lengths_of(args: argparse.Namespace) -> tuple[tuple[tuple[str, int], ...], str]:
    """(label, tokens) rows and where they came from: --lengths-from's percentiles, then --lengths."""
    rows: list[tuple[str, int]] = []
    sources = []
    if args.lengths_from:
        found, source = run_lengths(Path(args.lengths_from))
        rows += found
        sources.append(source)
    if args.lengths:
        rows += [(f"{n:,} tokens", n) for n in args.lengths]
        sources.append("--lengths")
    return tuple(rows), "; ".join(sources)


def _live(args: argparse.Namespace, say: Callable[[str], None]) -> tuple[ProbeResult, Path]:
    try:
        target, engine_argv, key = target_url(args.target), bundled_engine_argv(args), api_key(args)
    except ConfigError as exc:
        raise ProbeError(str(exc)) from None
    if args.max_kv_tokens < 2:
        raise ProbeError("--max-kv-tokens must be at least 2")
    lengths, source = lengths_of(args)
    out = Path(args.out) if args.out else default_out("probe")
    engine = None
    try:
        if target is None:
            say("starting the bundled engine")
            try:
                engine, target = start_bundled_engine(
                    args.model, engine_argv, out / "logs", key, args.startup_timeout
                )
            except RuntimeError as exc:
                raise ProbeError(str(exc)) from None
        settings = LiveSettings(
            target,
            args.model if args.target else None,
            key,
            args.llamacpp_kv_layout,
            args.max_kv_tokens,
            args.seed,
            lengths,
            source,
        )
        return asyncio.run(probe_live(settings, say)), out
    finally:
        if engine is not None:
            engine.stop()


def _from_bundle(args: argparse.Namespace) -> tuple[ProbeResult, Path]:
    if args.target or bundled_engine_argv(argparse.Namespace(**{**vars(args), "target": None})):
        raise ProbeError("a BUNDLE is probed from its records: --target and engine flags do not apply")
    bundle = Path(args.bundle)
    lengths, source = lengths_of(args)
    return probe_bundle(bundle, lengths, source), Path(args.out) if args.out else bundle


def run_probe(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    result, out = _from_bundle(args) if args.bundle else _live(args, say)
    write_result(out, result, markdown(result))
    print(console(result))
    print(f"probe: {out / 'probe.json'} (probe.md)")
    return 0 if result.fit.capacity_tokens is not None else 1
