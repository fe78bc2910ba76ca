"""vLLM, V0 and V1, across its renames (docs/reference/metric-dialects.md §1).

- KV usage: `kv_cache_usage_perc` (0.9.2+), else `gpu_cache_usage_perc` (V0 .. 0.11). Both are
  0-1 fractions of blocks despite "perc".
- Prefix counters: `prefix_cache_{queries,hits}_total` (tokens, 0.9.2+), else the
  deprecated `gpu_prefix_cache_*` pair, which counted *blocks* before 0.9.0. The unit is
  decided from the names present and the HELP text; block counts become tokens only when
  `cache_config_info` gives the block size. The V0 hit-rate gauge is never used.
- Inter-token latency: `inter_token_latency_seconds`, else the old TPOT histogram.
- Block residency (`--kv-cache-metrics`, 0.12+): the three `kv_block_*_seconds` histograms.
- Capacity: `cache_config_info`'s num_gpu_blocks x block_size; vLLM 0.32 also states
  `kv_cache_size_tokens`, used only when the block count is unusable (0.32 CPU: the same
  figure for a full-attention model; fixture tests/fixtures/vllm-0.32-cpu).
- Instances: one per (`model_name`, `engine`); `cache_config_info` carries `engine` but no
  model, so it is matched on `engine` alone (or applies to all when it has none).
"""

from __future__ import annotations

from exporter.dialects.common import (
    FamilyIndex,
    Keyer,
    Spec,
    counter,
    extract,
    fill_capacity,
    num,
    unobserved_note,
)
from exporter.dialects.sample import EngineSample, Normalised
from exporter.quantities import Key

NEW_PREFIX = ("vllm_prefix_cache_queries_total", "vllm_prefix_cache_hits_total")
OLD_PREFIX = ("vllm_gpu_prefix_cache_queries_total", "vllm_gpu_prefix_cache_hits_total")

SPEC = Spec(
    gauges={
        "kv_usage_ratio": (("vllm_kv_cache_usage_perc", "vllm_gpu_cache_usage_perc"), None),
        "requests_running": (("vllm_num_requests_running",), None),
        "requests_waiting": (("vllm_num_requests_waiting",), None),
    },
    counters={
        "preemptions": (("vllm_num_preemptions_total",), None),
        "prompt_tokens": (("vllm_prompt_tokens_total",), None),
        "generation_tokens": (("vllm_generation_tokens_total",), None),
        "requests_finished": (("vllm_request_success_total",), None),
    },
    histograms={
        "time_to_first_token_seconds": ("vllm_time_to_first_token_seconds",),
        "inter_token_latency_seconds": (
            "vllm_inter_token_latency_seconds",
            "vllm_time_per_output_token_seconds",
        ),
        "e2e_request_latency_seconds": ("vllm_e2e_request_latency_seconds",),
        "request_queue_time_seconds": ("vllm_request_queue_time_seconds",),
        "kv_block_lifetime_seconds": ("vllm_kv_block_lifetime_seconds",),
        "kv_block_idle_before_evict_seconds": ("vllm_kv_block_idle_before_evict_seconds",),
        "kv_block_reuse_gap_seconds": ("vllm_kv_block_reuse_gap_seconds",),
    },
    prefixes=("vllm_",),
)

V1_NAMES = frozenset(
    {
        "vllm_kv_cache_usage_perc",
        "vllm_prefix_cache_queries",
        "vllm_prefix_cache_queries_total",
        "vllm_gpu_prefix_cache_queries",
        "vllm_gpu_prefix_cache_queries_total",
        "vllm_gpu_prefix_cache_queries_created",
        "vllm_inter_token_latency_seconds",
        "vllm_request_success_created",
        "vllm_num_preemptions_created",
    }
)
V0_NAMES = frozenset(
    {
        "vllm_gpu_prefix_cache_hit_rate",
        "vllm_cpu_prefix_cache_hit_rate",
        "vllm_cpu_cache_usage_perc",
        "vllm_num_requests_swapped",
        "vllm_time_in_queue_requests",
        "vllm_avg_prompt_throughput_toks_per_s",
    }
)


def variant(idx: FamilyIndex) -> str | None:
    names = idx.names()
    if names & V1_NAMES or any("engine" in labels for rows in idx.samples.values() for labels, _ in rows[:1]):
        return "v1"
    if names & V0_NAMES:
        return "v0"
    return None


def _prefix_unit(idx: FamilyIndex, pair: tuple[str, str]) -> str | None:
    if pair == NEW_PREFIX or "vllm_kv_cache_usage_perc" in idx.names():
        return "tokens"  # 0.9.2+: every prefix counter counts tokens
    for name, text in idx.helps.items():
        if name.startswith("vllm_gpu_prefix_cache_q") or name.startswith("vllm_gpu_prefix_cache_h"):
            if "block" in text:
                return "blocks"
            if "token" in text:
                return "tokens"
    return None


def _prefix(idx: FamilyIndex, keyer: Keyer, samples: dict, notes: list[str]) -> None:
    if all(idx.has(n) for n in NEW_PREFIX):
        names = [NEW_PREFIX, NEW_PREFIX]
    elif all(idx.has(n) for n in OLD_PREFIX):
        names = [OLD_PREFIX, OLD_PREFIX]
        notes.append("prefix-cache counters from deprecated vllm:gpu_prefix_cache_* (vLLM <= 0.11)")
    else:
        names = [NEW_PREFIX, OLD_PREFIX]
    q, q_name = counter(idx, (names[0][0], names[1][0]), keyer)
    h, h_name = counter(idx, (names[0][1], names[1][1]), keyer)
    if q_name and h_name and (q_name in NEW_PREFIX) != (h_name in NEW_PREFIX):
        notes.append(f"prefix-cache statistics mix names: queries from {q_name}, hits from {h_name}")
    used = q_name or h_name or ""
    unit = _prefix_unit(idx, NEW_PREFIX if used in NEW_PREFIX else OLD_PREFIX) if used else None
    for key, s in samples.items():
        s.prefix_cache_queries_tokens = q.get(key)
        s.prefix_cache_hits_tokens = h.get(key)
        if used:
            s.prefix_cache_unit = unit
    if used and unit is None:
        notes.append("prefix-cache counters may count blocks (vLLM < 0.9.0), not tokens: unit unknown")


def _cache_config(idx: FamilyIndex, samples: dict[Key, EngineSample], notes: list[str]) -> None:
    rows = idx.rows("vllm_cache_config_info")
    if not rows:
        return
    for labels, _ in rows:
        engine = labels.get("engine")
        for s in samples.values():
            if engine is not None and s.labels.get("engine", "0") != engine:
                continue
            s.kv_block_size_tokens = num(labels.get("block_size"))
            s.kv_capacity_blocks = num(labels.get("num_gpu_blocks"))
            s.kv_cache_dtype = labels.get("cache_dtype")
            s.gpu_memory_utilization = num(labels.get("gpu_memory_utilization"))
            s.enable_prefix_caching = {"True": True, "False": False}.get(
                labels.get("enable_prefix_caching", "")
            )
            _stated_tokens(s, num(labels.get("kv_cache_size_tokens")), notes)
            fill_capacity(s)
    if any(labels.get("num_gpu_blocks") in (None, "None") for labels, _ in rows):
        known = all(s.kv_capacity_tokens for s in samples.values())
        notes.append(
            "cache_config_info has no usable num_gpu_blocks: KV capacity "
            + ("from kv_cache_size_tokens" if known else "unknown")
        )


def _stated_tokens(s: EngineSample, stated: float | None, notes: list[str]) -> None:
    """vLLM 0.32 states its token capacity (`kv_cache_size_tokens`: max concurrency x
    max_model_len, aware of sliding-window and hybrid layer groups). It is the capacity when
    the block count is unusable; otherwise blocks x block size stays the capacity, so blocks,
    tokens and the usage gauge (a share of blocks) agree, and a disagreement is noted."""
    if stated is None:
        return
    if s.kv_capacity_blocks is None:
        s.kv_capacity_tokens = stated
    elif s.kv_block_size_tokens and stated != s.kv_capacity_blocks * s.kv_block_size_tokens:
        note = (
            f"cache_config_info states kv_cache_size_tokens={stated:g}, not num_gpu_blocks x block_size = "
            f"{s.kv_capacity_blocks * s.kv_block_size_tokens:g} (layer groups of different kinds, e.g. "
            "sliding window): KV capacity is given in blocks x block_size"
        )
        if note not in notes:
            notes.append(note)


def _blocks_to_tokens(samples: dict[Key, EngineSample], notes: list[str]) -> None:
    converted = False
    for s in samples.values():
        if s.prefix_cache_unit == "blocks" and s.kv_block_size_tokens:
            for q in ("prefix_cache_queries_tokens", "prefix_cache_hits_tokens"):
                v = getattr(s, q)
                if v is not None:
                    setattr(s, q, v * s.kv_block_size_tokens)
            s.prefix_cache_unit = "tokens"
            converted = True
        elif s.prefix_cache_unit == "blocks":
            notes.append(
                "prefix-cache counters are block counts (vLLM < 0.9.0); block size unknown, not converted"
            )
    if converted:
        notes.append("approximated: block-counted prefix statistics (vLLM < 0.9.0) x block_size = tokens")


def normalise(idx: FamilyIndex) -> Normalised:
    keyer = Keyer(model_labels=("model_name", "model"), instance_labels=("engine",))
    samples, used = extract(idx, SPEC, keyer)
    notes: list[str] = []
    _prefix(idx, keyer, samples, notes)
    _cache_config(idx, samples, notes)
    _blocks_to_tokens(samples, notes)
    if used.get("kv_usage_ratio") == "vllm_gpu_cache_usage_perc":
        notes.append("KV usage from vllm:gpu_cache_usage_perc (the pre-0.9.2 name)")
    if used.get("inter_token_latency_seconds") == "vllm_time_per_output_token_seconds":
        notes.append("inter-token latency from the old vllm:time_per_output_token_seconds (TPOT) histogram")
    if idx.has("vllm_gpu_prefix_cache_hit_rate"):
        notes.append("ignored vllm:gpu_prefix_cache_hit_rate (V0 block hit-rate gauge; -1 = disabled)")
    if samples and not idx.has("vllm_cache_config_info"):
        notes.append("KV capacity unknown: no vllm:cache_config_info")
    notes += unobserved_note(idx, ("vllm_",))
    return Normalised("vllm", variant(idx), list(samples.values()), notes=notes)
