"""SGLang (docs/reference/metric-dialects.md §2): token-counted KV pool, retractions as preemptions.

- KV usage: `kv_used_tokens / max_total_num_tokens` (2026; excludes evictable radix-cache
  tokens, like vLLM's usage) else `token_usage`, else `num_used_tokens / max_total_num_tokens`.
- Prefix hits: `cached_tokens_total` over `prompt_tokens_total` (queries = prompt tokens), or
  `realtime_tokens_total{mode=prefill_cache}` over prefill_cache + prefill_compute. The
  `cache_hit_rate` gauge (last prefill batch, reset on decode) is never used.
- Preemptions: `num_retracted_requests_total`; the per-interval `num_retracted_reqs` gauge
  loses events between scrapes and is not turned into a counter.
- Instances: one per (`model_name` or old `name`, `dp_rank`); series of a non-zero tp/pp/ep
  rank repeat rank 0's scheduler state and are dropped so nothing is double-counted.
"""

from __future__ import annotations

from exporter.dialects.common import FamilyIndex, Keyer, Spec, counter, extract, gauge, unobserved_note
from exporter.dialects.sample import Normalised

SPEC = Spec(
    gauges={
        "requests_running": (("sglang_num_running_reqs",), None),
        "requests_waiting": (("sglang_num_queue_reqs",), None),
        "kv_capacity_tokens": (("sglang_max_total_num_tokens",), None),
    },
    counters={
        "preemptions": (("sglang_num_retracted_requests_total",), None),
        "prompt_tokens": (("sglang_prompt_tokens_total",), None),
        "generation_tokens": (("sglang_generation_tokens_total",), None),
        "requests_finished": (("sglang_num_requests_total",), None),
    },
    histograms={
        "time_to_first_token_seconds": ("sglang_time_to_first_token_seconds",),
        "inter_token_latency_seconds": (
            "sglang_inter_token_latency_seconds",
            "sglang_time_per_output_token_seconds",
        ),
        "e2e_request_latency_seconds": ("sglang_e2e_request_latency_seconds",),
        "request_queue_time_seconds": ("sglang_queue_time_seconds",),
    },
    prefixes=("sglang_",),
)
RANKS = ("tp_rank", "pp_rank", "moe_ep_rank")


def _other_rank(labels: dict[str, str]) -> bool:
    return any(labels.get(r, "0") != "0" for r in RANKS)


def normalise(idx: FamilyIndex) -> Normalised:
    keyer = Keyer(model_labels=("model_name", "name"), instance_labels=("dp_rank",), drop=_other_rank)
    samples, used = extract(idx, SPEC, keyer)
    notes: list[str] = []
    used_tokens, _ = gauge(idx, ("sglang_kv_used_tokens",), keyer)
    num_used, _ = gauge(idx, ("sglang_num_used_tokens",), keyer)
    token_usage, _ = gauge(idx, ("sglang_token_usage",), keyer)
    for key, s in samples.items():
        cap = s.kv_capacity_tokens
        if key in used_tokens and cap:
            s.kv_usage_ratio = used_tokens[key] / cap
        elif key in token_usage:
            s.kv_usage_ratio = token_usage[key]
        elif key in num_used and cap:
            s.kv_usage_ratio = num_used[key] / cap
    hits, hit_name = counter(idx, ("sglang_cached_tokens_total",), keyer)
    if hit_name:
        queries = {k: s.prompt_tokens for k, s in samples.items()}
        notes.append(
            "prefix-cache queries = sglang:prompt_tokens_total (SGLang counts cached prompt tokens, not "
            "lookups)"
        )
    else:
        hits, hit_name = counter(idx, ("sglang_realtime_tokens_total",), keyer, ("mode", "prefill_cache"))
        compute, _ = counter(idx, ("sglang_realtime_tokens_total",), keyer, ("mode", "prefill_compute"))
        queries = {k: hits[k] + compute[k] for k in hits if k in compute}
        if hit_name:
            notes.append(
                "prefix-cache statistics from "
                "sglang:realtime_tokens_total{mode=prefill_cache|prefill_compute}"
            )
    for key, s in samples.items():
        if key in hits and queries.get(key) is not None:
            s.prefix_cache_hits_tokens, s.prefix_cache_queries_tokens = hits[key], queries[key]
            s.prefix_cache_unit = "tokens"
    if not hit_name:
        notes.append("prefix-cache hits unknown: no sglang:cached_tokens_total or realtime_tokens_total")
    if idx.has("sglang_cache_hit_rate"):
        notes.append("ignored sglang:cache_hit_rate (last prefill batch only, reset to 0 on decode)")
    if "preemptions" not in used:
        lossy = (
            " (only the per-interval num_retracted_reqs gauge, which loses events)"
            if idx.has("sglang_num_retracted_reqs")
            else ""
        )
        notes.append("preemptions unknown: no sglang:num_retracted_requests_total" + lossy)
    if "requests_finished" not in used:
        e2e = {
            k: s.histograms["e2e_request_latency_seconds"].count
            for k, s in samples.items()
            if "e2e_request_latency_seconds" in s.histograms
        }
        for key, count in e2e.items():
            samples[key].requests_finished = count
        if e2e:
            notes.append("requests finished approximated by sglang:e2e_request_latency_seconds_count")
    if used.get("inter_token_latency_seconds") == "sglang_time_per_output_token_seconds":
        notes.append("inter-token latency from the old sglang:time_per_output_token_seconds histogram")
    notes.append("KV block size and capacity in blocks unknown: SGLang counts its pool in tokens")
    if any(s.labels.get("dp_rank") for s in samples.values()) and "0" in {k[1] for k in samples}:
        notes.append("tokenizer-level counters carry no dp_rank: server totals are attributed to instance 0")
    notes += unobserved_note(idx, ("sglang_",))
    return Normalised("sglang", None, list(samples.values()), notes=notes)
