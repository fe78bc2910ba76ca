"""How a configuration field declares its command-line flag (`arg_field`).

A config dataclass field made with `arg_field` carries its flag's help text (and, where the
name or spelling differs from the field's, the flag itself) in `dataclasses.field` metadata.
`reference_engine.engine_args` reads that metadata to build every `kvscope engine` flag, so a
flag is declared exactly once, next to the value it sets. Stdlib only: config modules import
this, and `import reference_engine` must stay light.
"""

from __future__ import annotations

import dataclasses
from typing import Any

ARG_METADATA_KEY = "kvscope_arg"


@dataclasses.dataclass(frozen=True, slots=True)
class ArgSpec:
    """What a field's metadata says about its flag. `flag` None: `--` + the field name with
    dashes. `exclusive` names a mutually exclusive group the flag belongs to."""

    help: str
    flag: str | None = None
    metavar: str | None = None
    exclusive: str | None = None


def arg_field(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    exclusive: str | None = None,
    repr: bool = True,
) -> Any:
    """`dataclasses.field(default=default)` that also declares the field's flag. `repr=False`
    keeps a secret (an API key) out of reprs and logs."""
    spec = ArgSpec(help, flag, metavar, exclusive)
    return dataclasses.field(default=default, repr=repr, metadata={ARG_METADATA_KEY: spec})
