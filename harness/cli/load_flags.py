"""The flag groups `kvscope run` and `kvscope sweep` share: the workload options and the
engine flags passed through to the bundled engine (both from their declarations, with
defaults of None so only what the user gave is forwarded)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from harness.run.engine_flags import PASS_THROUGH
from harness.workload.options import Option, add_to_parser, run_options, workloads_with

T = TypeVar("T", int, float)


def comma_list(text: str, cast: Callable[[str], T], valid: Callable[[T], bool], hint: str) -> list[T]:
    """`1,2,4` as values of `cast`, each `valid`; argparse's error (with `hint`) otherwise."""
    try:
        values = [cast(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or not all(valid(v) for v in values):
        raise argparse.ArgumentTypeError(hint)
    return values


def add_workload_options(parser: argparse.ArgumentParser, title: str) -> None:
    """Every workload option once; a workload's own ones name the workloads that have them."""
    group = parser.add_argument_group(title)
    for o in run_options():
        users = ", ".join(workloads_with(o.flag))
        labelled = Option(o.flag, o.type, None, f"{o.help} [{users}]", o.choices) if users else o
        add_to_parser(group, (labelled,), defaults=False)


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "engine flags (only without --target; passed to `kvscope engine serve`)"
    )
    for p in PASS_THROUGH:
        if p.arg.type is None:
            action = "store_false" if p.arg.default else "store_true"
            group.add_argument(p.flag, dest=p.dest, action=action, default=None, help=p.help)
        else:
            group.add_argument(
                p.flag,
                dest=p.dest,
                type=p.arg.type,
                choices=p.arg.choices,
                metavar=p.arg.metavar,
                help=p.help,
            )
    group.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for `kvscope engine serve`, verbatim (repeatable)",
    )
