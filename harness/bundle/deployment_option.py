"""`--deployment KEY=VALUE,...`: what the user states about a --target server, as facts.

  --deployment model=llama-3.1-8b,gpu=h100-80gb,tp=1,kv-cache-dtype=auto,num-gpu-blocks=9518,max-num-seqs=256

Keys are vLLM's flag names without the leading dashes (`tp` is short for
tensor-parallel-size, `num-gpu-blocks` is vLLM's name for the KV pool in blocks, null block
included); `model` and `gpu` are catalogue names (`kvscope size --help` lists them), which
is what sizing and replays can use. Each becomes a Fact with source USER in the section its
name belongs to (`harness.bundle.deployment`). A bad key or value raises ValueError with
the accepted keys, before anything starts.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Any

from harness.bundle.deployment import DeploymentFacts, Fact, conforms
from reference_engine.catalogue import CatalogueError, get_gpu, get_model
from reference_engine.config import EngineConfig
from reference_engine.sim.spec import SimSpec

USER = "user (--deployment)"


@dataclass(frozen=True, slots=True)
class Key:
    section: str  # "engine" or "catalogue"
    field: str
    example: str  # a value that parses, for error messages
    placeholder: str  # what to fill in, for the advice's "state it with"


KEYS: dict[str, Key] = {
    "model": Key("catalogue", "model", "llama-3.1-8b", "CATALOGUE_MODEL"),
    "gpu": Key("catalogue", "gpu", "h100-80gb", "CATALOGUE_GPU"),
    "tp": Key("catalogue", "tensor_parallel_size", "1", "N"),
    "tensor-parallel-size": Key("catalogue", "tensor_parallel_size", "1", "N"),
    "gpu-memory-utilization": Key("catalogue", "gpu_memory_utilization", "0.9", "FRACTION"),
    "weight-dtype": Key("catalogue", "weight_dtype", "bf16", "auto|bf16|fp16|fp8|int8|int4"),
    "kv-cache-dtype": Key("engine", "kv_cache_dtype", "auto", "auto|fp8|int8"),
    "num-gpu-blocks": Key("engine", "num_blocks", "9518", "N"),
    "block-size": Key("engine", "block_size", "16", "N"),
    "max-num-seqs": Key("engine", "max_num_seqs", "256", "N"),
    "max-num-batched-tokens": Key("engine", "max_num_batched_tokens", "8192", "N"),
    "max-model-len": Key("engine", "max_model_len", "8192", "N"),
    "enable-prefix-caching": Key("engine", "enable_prefix_caching", "true", "true|false"),
    "allocator": Key("engine", "allocator", "paged", "paged|contiguous"),
}
_HINTS = {
    "engine": typing.get_type_hints(EngineConfig),
    "catalogue": typing.get_type_hints(SimSpec),
}
_FIELDS = {"engine": {f.name for f in fields(EngineConfig)}, "catalogue": {f.name for f in fields(SimSpec)}}
assert all(k.field in _FIELDS[k.section] for k in KEYS.values())


def key_for(field_name: str) -> str:
    """The --deployment key that states a field (the first, shortest spelling)."""
    return next(k for k, v in KEYS.items() if v.field == field_name)


def supply(field_name: str) -> str:
    """How to state a field, e.g. `--deployment max-num-seqs=N`."""
    k = key_for(field_name)
    return f"--deployment {k}={KEYS[k].placeholder}"


def _value(text: str, hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if typing.get_origin(hint) is not typing.Literal and args else hint
    if base is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError("expected true or false")
        return text.lower() in ("true", "1", "yes")
    if base is int:
        return int(text)
    if base is float:
        return float(text)
    return text


def parse_deployment(text: str) -> dict[str, dict[str, Fact]]:
    """{section: {field: Fact}} from `key=value,...`; ValueError names the bad part."""
    out: dict[str, dict[str, Fact]] = {"engine": {}, "catalogue": {}}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        key = KEYS.get(name.strip().lower().replace("_", "-"))
        if not sep or key is None:
            raise ValueError(f"--deployment: {part!r} is not KEY=VALUE with KEY one of {', '.join(KEYS)}")
        hint = _HINTS[key.section][key.field]
        try:
            value = _value(raw.strip(), hint)
        except ValueError as exc:
            raise ValueError(f"--deployment {name}={raw}: {exc}") from None
        positive = isinstance(value, bool) or not isinstance(value, (int, float)) or value > 0
        if not conforms(value, hint) or not positive:
            raise ValueError(
                f"--deployment {name}={raw}: not a valid {key.field} (e.g. {name}={key.example})"
            )
        try:
            if key.field == "model":
                value = get_model(value).name
            elif key.field == "gpu":
                value = get_gpu(value).name
        except CatalogueError as exc:
            raise ValueError(f"--deployment {name}: {exc}") from None
        out[key.section][key.field] = Fact(value, USER)
    return out


def with_user_facts(
    facts: DeploymentFacts, stated: dict[str, dict[str, Fact]]
) -> tuple[DeploymentFacts, list[str]]:
    """`facts` with the user's statements added; where one differs from what the server stated,
    the user's wins and a note says so."""
    notes = [
        f"--deployment {f}={fact.value!r} replaces {getattr(facts, section)[f].value!r} from "
        f"{getattr(facts, section)[f].source}"
        for section in ("engine", "catalogue")
        for f, fact in stated.get(section, {}).items()
        if f in getattr(facts, section) and getattr(facts, section)[f].value != fact.value
    ]
    merged = DeploymentFacts(
        facts.server,
        {**facts.engine, **stated.get("engine", {})},
        {**facts.catalogue, **stated.get("catalogue", {})},
    )
    return merged, notes
