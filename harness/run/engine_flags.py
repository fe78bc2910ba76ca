"""The engine flags `kvscope run` and `kvscope sweep` pass through to the bundled engine,
taken from the engine's own declarations (`reference_engine.engine_args`): none is listed here.

Every engine and simulator flag passes, except `--model` (kvscope run's own: the engine's
model, or with --target the model to request) and `--seed`, which is the workload's: the
engine's is `--engine-seed` here, and is passed last, as the engine's `--seed`. Of the
server's flags only `--served-model-name` passes: kvscope run picks the address and hands
the engine the workload's API key itself.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from reference_engine.engine_args import EngineArg, engine_args

STARTUP_TIMEOUT_S = 300.0  # how long the bundled engine may take to answer /health (model load)
RENAMED = {"--seed": "--engine-seed"}
OWN_FLAGS = frozenset({"--model"})
SERVER_FLAGS = frozenset({"--served-model-name", "--no-kvscope-timing"})


@dataclass(frozen=True, slots=True)
class PassThrough:
    """One engine flag as kvscope run spells it (`flag`, `dest`), and the engine's (`arg`)."""

    flag: str
    arg: EngineArg

    @property
    def renamed(self) -> bool:
        return self.flag != self.arg.flag

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_") if self.renamed else self.arg.dest

    @property
    def help(self) -> str:
        return f"{self.arg.help} (the engine's {self.arg.flag})" if self.renamed else self.arg.help


PASS_THROUGH: tuple[PassThrough, ...] = tuple(
    PassThrough(RENAMED.get(a.flag, a.flag), a)
    for a in engine_args()
    if a.flag not in OWN_FLAGS and (a.group != "server" or a.flag in SERVER_FLAGS)
)


def _flags(given: list[tuple[PassThrough, object]]) -> list[str]:
    out: list[str] = []
    for p, value in given:
        out += [p.arg.flag] if p.arg.type is None else [p.arg.flag, str(value)]
    return out


def engine_argv(values: argparse.Namespace) -> list[str]:
    """The engine's command line for what the user gave (a dest left None was not given):
    the flags in declaration order, then `--engine-arg` verbatim, then the renamed ones."""
    given = [(p, v) for p in PASS_THROUGH if (v := getattr(values, p.dest, None)) is not None]
    return (
        _flags([(p, v) for p, v in given if not p.renamed])
        + list(getattr(values, "engine_arg", None) or [])
        + _flags([(p, v) for p, v in given if p.renamed])
    )
