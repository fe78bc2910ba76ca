"""llama.cpp `llama-server` (docs/reference/llamacpp-server.md, metric-dialects.md §5): no labels,
no KV metrics since May 2025.

- Prefix cache: `prompt_tokens_cached_total` counts prompt tokens reused from the cache and
  `prompt_tokens_total` the prompt tokens computed, cached ones *excluded* (its HELP says so;
  checked request by request against the server's `timings`). So hits = cached and queries =
  cached + computed; the hit ratio of a window is Δcached / (Δcached + Δcomputed).
- Running = busy slots (`requests_processing`), waiting = deferred tasks (`requests_deferred`).
- KV usage and capacity: no series at this version; the dialect's probe (GET /slots, see
  `llamacpp_slots`) supplies them. Builds from before PR #13660 exported
  `kv_cache_usage_ratio` (0-1), which is used when present.
"""

from __future__ import annotations

from exporter.dialects.common import FamilyIndex, Keyer, Spec, counter, extract, unobserved_note
from exporter.dialects.sample import Normalised

PREFIX = ("llamacpp_",)
COMPUTED = "llamacpp_prompt_tokens_total"
CACHED = "llamacpp_prompt_tokens_cached_total"
SPEC = Spec(
    gauges={
        "kv_usage_ratio": (("llamacpp_kv_cache_usage_ratio",), None),
        "requests_running": (("llamacpp_requests_processing",), None),
        "requests_waiting": (("llamacpp_requests_deferred",), None),
    },
    counters={
        "prompt_tokens": ((COMPUTED,), None),
        "generation_tokens": (("llamacpp_tokens_predicted_total",), None),
    },
    prefixes=PREFIX,
)


def normalise(idx: FamilyIndex) -> Normalised:
    keyer = Keyer(model_labels=())
    samples, _ = extract(idx, SPEC, keyer)
    cached, cached_name = counter(idx, (CACHED,), keyer)
    notes: list[str] = []
    for key, s in samples.items():
        if key in cached and s.prompt_tokens is not None:
            s.prefix_cache_hits_tokens = cached[key]
            s.prefix_cache_queries_tokens = cached[key] + s.prompt_tokens
            s.prefix_cache_unit = "tokens"
    if cached_name:
        notes.append(
            "prefix-cache queries = prompt_tokens_cached_total + prompt_tokens_total (the latter "
            "excludes cached tokens); prompt_tokens counts computed prompt tokens only"
        )
    elif samples:
        notes.append("prefix-cache counters unknown: no llamacpp:prompt_tokens_cached_total (older build)")
    notes.append("no preemption, finished-request or latency-histogram metrics in llama.cpp")
    notes += unobserved_note(idx, PREFIX)
    return Normalised("llamacpp", None, list(samples.values()), notes=notes)
