"""The `kvscope` command: one entry point, one module per command group.

Each module in COMMAND_MODULES exposes `register(subparsers)`, adds its parser(s) and sets
`func` on them. Modules must be import-light (no torch, pandas or locust at import time)
so `kvscope --help` stays fast; handlers import what they need.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMAND_MODULES = (
    "reference_engine.cli",  # kvscope engine generate|serve
    "exporter.cli",  # kvscope exporter [inspect]
    "dashboards.cli",  # kvscope dashboards export|import
    "harness.cli.size",  # kvscope size
    "harness.cli.run",  # kvscope run
    "harness.cli.worker",  # kvscope worker
    "harness.cli.sweep",  # kvscope sweep
    "harness.cli.report",  # kvscope report
    "harness.cli.advise",  # kvscope advise DIR | --live URL
    "harness.cli.probe",  # kvscope probe [BUNDLE] | --target URL
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvscope",
        description="Load-test paged LLM servers, watch their KV cache, and get told what to change.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `kvscope ... | head` closed our stdout; that is the reader's choice, not an error.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 0
