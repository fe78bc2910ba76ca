"""What run.json records about the serving deployment: facts, each with its source.

A fact is a value and where it came from: "kvscope run (bundled engine)" when kvscope
started the engine or simulator itself (the configuration it ran with, field by field),
"server (<where>)" for what a --target server stated about itself (/v1/models, llama.cpp's
/props, SGLang's /get_server_info, TGI's /info, its /metrics), or "user (--deployment)" for
what the user stated (`deployment_option`). Nothing is filled in from defaults: a fact no
source stated is absent, and readers must treat it as unknown.

Sections are named by what the facts describe, with the field names of the types they come
from, so a new source (a user's statement, another server probe) adds facts without a new
layout:
- `engine`: the serving engine's configuration in `EngineConfig`'s names (vLLM's flag
  names: block_size, num_blocks, max_num_seqs, max_model_len, kv_cache_dtype, ...);
- `catalogue`: the hardware and model in catalogue terms (`SimSpec`'s names: model, gpu,
  tensor_parallel_size, gpu_memory_utilization, weight_dtype) — what the simulator models.

Invariant: `from_json(to_json(d)) == d`; `from_json` of anything malformed raises BundleError.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from harness.bundle.errors import BundleError
from reference_engine.config import EngineConfig

ServerKind = Literal["bundled engine", "bundled simulator", "target"]
SERVER_KINDS: tuple[str, ...] = typing.get_args(ServerKind)
SECTIONS = ("engine", "catalogue")

BUNDLED = "kvscope run (bundled engine)"
SERVER_MODELS = "server (/v1/models)"


def server_source(where: str) -> str:
    return f"server ({where})"


@dataclass(frozen=True, slots=True)
class Fact:
    value: Any
    source: str


@dataclass(frozen=True, slots=True)
class DeploymentFacts:
    """`server`: whether kvscope started the server (engine or simulator) or measured a
    --target; the sections hold only stated facts."""

    server: ServerKind
    engine: dict[str, Fact] = field(default_factory=dict)
    catalogue: dict[str, Fact] = field(default_factory=dict)

    @property
    def bundled(self) -> bool:
        return self.server != "target"

    def values(self, section: str) -> dict[str, Any]:
        return {name: f.value for name, f in getattr(self, section).items()}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"server": self.server}
        for section in SECTIONS:
            out[section] = {
                k: {"value": f.value, "source": f.source} for k, f in getattr(self, section).items()
            }
        return out

    @classmethod
    def from_json(cls, data: Any) -> DeploymentFacts:
        if not isinstance(data, dict) or data.get("server") not in SERVER_KINDS:
            raise BundleError(
                f"run.json: deployment must name its server as one of {', '.join(SERVER_KINDS)}"
            )
        sections = {}
        for section in SECTIONS:
            raw = data.get(section) or {}
            if not isinstance(raw, dict) or not all(
                isinstance(f, dict) and "value" in f and isinstance(f.get("source"), str)
                for f in raw.values()
            ):
                raise BundleError(f"run.json: deployment.{section} must map names to {{value, source}}")
            sections[section] = {str(k): Fact(f["value"], f["source"]) for k, f in raw.items()}
        facts = cls(data["server"], **sections)
        _check_engine(facts.engine)
        return facts


def of_config(
    server: ServerKind, engine: dict[str, Any], catalogue: dict[str, Any] | None, source: str
) -> DeploymentFacts:
    """Every field of a configuration kvscope ran with, from one source (`dataclasses.asdict`
    of the EngineConfig and, for the simulator, of its SimSpec)."""
    return DeploymentFacts(
        server,
        {k: Fact(v, source) for k, v in engine.items()},
        {k: Fact(v, source) for k, v in (catalogue or {}).items()},
    )


_ENGINE_HINTS = typing.get_type_hints(EngineConfig)
_ENGINE_FIELDS = {f.name for f in fields(EngineConfig)}


def conforms(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return value in args
    if args and origin is not None and origin is not list:  # X | None
        return any(conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _check_engine(engine: dict[str, Fact]) -> None:
    bad = [
        f"engine.{k}={f.value!r}"
        for k, f in engine.items()
        if k not in _ENGINE_FIELDS or not conforms(f.value, _ENGINE_HINTS[k])
    ]
    if bad:
        raise BundleError(f"run.json: deployment facts do not parse: {', '.join(bad)}")
