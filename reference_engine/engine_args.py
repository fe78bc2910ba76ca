"""Engine arguments, declared once (vLLM `EngineArgs`-style): flags from config field metadata.

The config dataclasses (`EngineConfig`, the simulator's `SimSpec`, the server's
`ServeOptions`) declare each flag's help on the field (`arg_field`); the flag's type and
choices come from the field's annotation (`typing.get_args` of a `Literal`), its default from
the field's default. `kvscope engine serve`, `kvscope engine generate` and the harness's
pass-through list are all built from `engine_args()`, so no flag is written twice.

Rules: a flag is `--` + the field name with dashes unless the field says otherwise; its dest
is argparse's for that flag, except a `--no-X` switch, whose dest is X. A bool field is a
switch (`type` None): giving the flag stores the opposite of the default.

Stdlib only (no torch, no aiohttp): the harness imports this to build and record configs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal, get_args, get_origin

from reference_engine.arg_field import ARG_METADATA_KEY, ArgSpec
from reference_engine.config import EngineConfig
from reference_engine.serve_options import ServeOptions
from reference_engine.sim.spec import SimSpec

ArgGroup = Literal["server", "engine", "simulator"]
ARG_GROUPS: tuple[ArgGroup, ...] = get_args(ArgGroup)
# argparse section titles, as `--help` has always shown them
_TITLES: dict[ArgGroup, str] = {"server": "server", "engine": "engine", "simulator": "simulation"}


@dataclasses.dataclass(frozen=True, slots=True)
class EngineArg:
    """One flag. `help` is final text (the field's default written in), so a parser with other
    defaults (the harness passes only what its user gave) still states the engine's.
    `type` None is a switch (store the opposite of `default`). `field` is the
    config field it sets (None for `--simulate`, which only turns the simulation on);
    `exclusive` names a mutually exclusive group (`--num-blocks | --kv-cache-memory`)."""

    flag: str
    dest: str
    type: Callable[[str], Any] | None
    help: str
    choices: tuple[str, ...] | None
    group: ArgGroup
    default: Any
    metavar: str | None = None
    exclusive: str | None = None
    field: str | None = None


SIMULATE = EngineArg(
    "--simulate",
    "simulate",
    None,
    "no model: step times from a cost model, KV pool sized for --sim-model on --sim-gpu",
    None,
    "simulator",
    False,
)


def _flag_type(hint: Any) -> tuple[Callable[[str], Any] | None, tuple[str, ...] | None]:
    """(argparse type, choices) for a field annotation; (None, None) for a bool switch."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = (a for a in get_args(hint) if a is not type(None))
    if get_origin(hint) is Literal:
        return str, tuple(str(a) for a in get_args(hint))
    if hint is bool:
        return None, None
    if hint in (int, float, str):
        return hint, None
    raise TypeError(f"no flag type for annotation {hint!r}")


def _dest(flag: str, switch: bool) -> str:
    name = flag.removeprefix("--")
    if switch:
        name = name.removeprefix("no-")
    return name.replace("-", "_")


def _args_of(cls: type, group: ArgGroup) -> tuple[EngineArg, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec: ArgSpec | None = f.metadata.get(ARG_METADATA_KEY)
        if spec is None:
            continue
        kind, choices = _flag_type(hints[f.name])
        flag = spec.flag or "--" + f.name.replace("_", "-")
        out.append(
            EngineArg(
                flag=flag,
                dest=_dest(flag, kind is None),
                type=kind,
                help=spec.help.replace("%(default)s", str(f.default)),
                choices=choices,
                group=group,
                default=f.default,
                metavar=spec.metavar,
                exclusive=spec.exclusive,
                field=f.name,
            )
        )
    return tuple(out)


@functools.cache
def _all_args() -> Mapping[ArgGroup, tuple[EngineArg, ...]]:
    return MappingProxyType(
        {
            "server": _args_of(ServeOptions, "server"),
            "engine": _args_of(EngineConfig, "engine"),
            "simulator": (SIMULATE, *_args_of(SimSpec, "simulator")),
        }
    )


def engine_args(*groups: ArgGroup) -> tuple[EngineArg, ...]:
    """Every flag of the given groups (all groups when none is given), in `--help` order."""
    table = _all_args()
    for g in groups:
        if g not in table:
            raise ValueError(f"unknown argument group {g!r}; known: {', '.join(ARG_GROUPS)}")
    return tuple(a for g in (groups or ARG_GROUPS) for a in table[g])


def add_engine_args(parser: argparse.ArgumentParser, groups: Iterable[ArgGroup] = ARG_GROUPS) -> None:
    """Add the flags of `groups` to `parser`, one argument group (section of `--help`) each."""
    for group in groups:
        section = parser.add_argument_group(_TITLES[group])
        exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
        for a in engine_args(group):
            target = section
            if a.exclusive is not None:
                if a.exclusive not in exclusive:
                    exclusive[a.exclusive] = section.add_mutually_exclusive_group()
                target = exclusive[a.exclusive]
            if a.type is None:
                action = "store_false" if a.default else "store_true"
                target.add_argument(a.flag, dest=a.dest, action=action, help=a.help)
            else:
                target.add_argument(
                    a.flag,
                    dest=a.dest,
                    type=a.type,
                    default=a.default,
                    choices=a.choices,
                    metavar=a.metavar,
                    help=a.help,
                )


def _build(cls: type, group: ArgGroup, ns: argparse.Namespace) -> Any:
    """`cls` from the namespace. A dest that is absent or None takes the field's default, so a
    namespace whose unset flags are None (the harness's pass-through) builds the same config."""
    values = {}
    for a in engine_args(group):
        if a.field is None:
            continue
        value = getattr(ns, a.dest, None)
        values[a.field] = a.default if value is None else value
    return cls(**values)


def engine_config_from_args(ns: argparse.Namespace) -> EngineConfig:
    return _build(EngineConfig, "engine", ns)


def simulator_config_from_args(ns: argparse.Namespace) -> SimSpec | None:
    """The simulated deployment, or None when `--simulate` is off."""
    if not getattr(ns, SIMULATE.dest, False):
        return None
    return _build(SimSpec, "simulator", ns)


def serve_options_from_args(ns: argparse.Namespace) -> ServeOptions:
    return _build(ServeOptions, "server", ns)
