"""What a --target server states about its deployment, as facts with their source.

At the start of a run (`target_facts`): /v1/models (model id, vLLM's max_model_len), then the
info endpoint of the server's engine, recognised from one /metrics scrape:
- llama.cpp `GET /props` (docs/reference/llamacpp-server.md): `total_slots` is how many
  requests run at once (max_num_seqs), `default_generation_settings.n_ctx` a slot's context,
  the most one request can hold (max_model_len);
- SGLang `GET /get_server_info` (its ServerArgs plus the scheduler's info):
  `max_running_requests`, `context_length`, `page_size`, `kv_cache_dtype`,
  `disable_radix_cache`;
- TGI `GET /info` (router `Info`): `max_total_tokens` (prompt + output per request).
At the end (`sample_facts`): what the exporter read from /metrics (vLLM's cache_config_info:
block size, pool blocks, cache dtype, gpu_memory_utilization), that the engine is a paged
one where its dialect says so, and that prefix caching is on when the cache hit.

Only values that parse as the field's type are kept; anything else is left unknown.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.dialects.common import FamilyIndex
from exporter.dialects.detect import detect
from exporter.parse import parse_exposition
from harness.bundle.deployment import DeploymentFacts, Fact, conforms, server_source
from harness.bundle.deployment_option import parse_deployment, with_user_facts
from harness.run.deployment import stated_facts
from reference_engine.config import EngineConfig

Get = Callable[[str, float], tuple[int, bytes]]
Stated = dict[str, dict[str, Fact]]
_HINTS = typing.get_type_hints(EngineConfig)
PAGED_DIALECTS = ("vllm", "sglang", "trtllm", "lmdeploy")  # block-paged KV caches by design
TIMEOUT_S = 3.0


def _put(out: Stated, section: str, name: str, value: Any, source: str) -> None:
    hint = _HINTS.get(name) if section == "engine" else float
    ok = conforms(value, hint) and (
        not isinstance(value, (int, float)) or isinstance(value, bool) or value > 0
    )
    if value is not None and ok:
        out.setdefault(section, {})[name] = Fact(value, source)


def _stated(body: Any, where: str, fields: dict[str, Callable[[dict], Any]]) -> Stated:
    """The engine facts `fields` read from a JSON body (each getter may return None)."""
    out: Stated = {}
    if isinstance(body, dict):
        for name, getter in fields.items():
            _put(out, "engine", name, getter(body), server_source(where))
    return out


def _slot_context(body: dict) -> Any:
    settings = body.get("default_generation_settings")
    return settings.get("n_ctx") if isinstance(settings, dict) else None


def _radix_cache(body: dict) -> bool | None:
    off = body.get("disable_radix_cache")
    return (not off) if isinstance(off, bool) else None


def props_facts(body: Any) -> Stated:
    """llama.cpp's GET /props."""
    return _stated(
        body, "/props", {"max_num_seqs": lambda b: b.get("total_slots"), "max_model_len": _slot_context}
    )


def sglang_facts(body: Any) -> Stated:
    """SGLang's GET /get_server_info."""
    return _stated(
        body,
        "/get_server_info",
        {
            "max_num_seqs": lambda b: b.get("max_running_requests"),
            "max_model_len": lambda b: b.get("context_length"),
            "block_size": lambda b: b.get("page_size"),
            "kv_cache_dtype": lambda b: b.get("kv_cache_dtype"),
            "enable_prefix_caching": _radix_cache,
        },
    )


def tgi_facts(body: Any) -> Stated:
    """TGI's GET /info."""
    return _stated(body, "/info", {"max_model_len": lambda b: b.get("max_total_tokens")})


INFO_ENDPOINTS: dict[str, tuple[str, Callable[[Any], Stated]]] = {
    "llamacpp": ("/props", props_facts),
    "sglang": ("/get_server_info", sglang_facts),
    "tgi": ("/info", tgi_facts),
}


def _json(get: Get, url: str) -> Any:
    status, body = get(url, TIMEOUT_S)
    try:
        return json.loads(body) if status == 200 else None
    except ValueError:
        return None


def merge(facts: DeploymentFacts, stated: Stated) -> DeploymentFacts:
    """`facts` plus `stated` where `facts` has nothing yet (the first source stays)."""
    return DeploymentFacts(
        facts.server,
        {**stated.get("engine", {}), **facts.engine},
        {**stated.get("catalogue", {}), **facts.catalogue},
    )


def target_facts(url: str, models: list[dict], requested: str | None, get: Get) -> DeploymentFacts:
    """/v1/models, then the engine's info endpoint (best effort: a server that answers
    neither has stated nothing more)."""
    facts = stated_facts(models, requested)
    status, text = get(url + "/metrics", TIMEOUT_S)
    dialect = detect(FamilyIndex(parse_exposition(text.decode(errors="replace")))) if status == 200 else None
    if dialect in INFO_ENDPOINTS:
        path, parse = INFO_ENDPOINTS[dialect]
        facts = merge(facts, parse(_json(get, url + path)))
    return facts


def _last_up(path: Path) -> tuple[dict | None, float]:
    """The last up sample of one exporter record file and the most prefix hits seen."""
    last, hits = None, 0.0
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("up") and row.get("instance") != "all":
                last = row
                hits = max(hits, float(row.get("prefix_cache_hits_tokens") or 0.0))
    return last, hits


def sample_facts(exporter_dir: Path) -> Stated:
    """What the server's /metrics stated during the run (the exporter's last sample)."""
    out: Stated = {}
    files = sorted(exporter_dir.glob("*.jsonl"))
    if not files:
        return out
    last, hits = _last_up(files[0])
    if last is None:
        return out
    dialect = last.get("dialect") or "unknown"
    src = server_source(f"{dialect} /metrics")
    for name, column in (("block_size", "kv_block_size_tokens"), ("num_blocks", "kv_capacity_blocks")):
        value = last.get(column)
        _put(out, "engine", name, int(value) if isinstance(value, (int, float)) else None, src)
    _put(out, "engine", "kv_cache_dtype", last.get("kv_cache_dtype"), src)
    _put(out, "catalogue", "gpu_memory_utilization", last.get("gpu_memory_utilization"), src)
    if dialect in PAGED_DIALECTS:
        _put(out, "engine", "allocator", "paged", server_source(f"{dialect}: a paged KV cache"))
    caching = last.get("enable_prefix_caching")
    if isinstance(caching, bool):
        _put(out, "engine", "enable_prefix_caching", caching, src)
    elif hits > 0:
        hit_src = server_source(f"{dialect} /metrics: prefix-cache hits")
        _put(out, "engine", "enable_prefix_caching", True, hit_src)
    return out


def recorded_facts(
    bundled: DeploymentFacts | None, at_start: DeploymentFacts, exporter_dir: Path, user: str
) -> tuple[DeploymentFacts, list[str]]:
    """run.json's deployment: the bundled engine's configuration, or for a --target what the
    server stated at the start and in its /metrics, then what the user stated (which wins,
    with a note where it contradicts the server)."""
    if bundled is not None:
        return bundled, []
    facts = merge(at_start, sample_facts(exporter_dir))
    return with_user_facts(facts, parse_deployment(user)) if user else (facts, [])
