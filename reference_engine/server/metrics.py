"""`/metrics` in vLLM V1's dialect: vLLM's names, types, units, labels and buckets.

Why vLLM's dialect: dashboards, alert rules and the exporter's vLLM parser then work on the
reference engine unchanged. Every family carries `model_name` (the served model name) and
`engine="0"`, as vLLM V1 does for engine core 0.

Where values come from (the engine core runs in another process or thread; see
`reference_engine.core.messages`):
- gauges (running, waiting, KV usage) are the core's `CoreStats` as of its latest iteration;
  the core sends a record after every step and after commands it applied while idle (an
  abort), so an idle server reports 0 as soon as requests end or abort;
- counters of engine work (prompt/generation tokens, prefix-cache queries/hits,
  preemptions) advance by the differences of the core's cumulative counters, so they equal
  what the engine did, not what the server thinks it did;
- histograms are observed per sequence (one choice of an n > 1 request is one sequence,
  as in vLLM, where each choice is its own engine request), at its first token, each later
  token, and when it finishes (stop, length or abort), from the core's timestamps;
- `kvscope:stream_write_delay_seconds` is the server's own: from the moment the core produced
  a step's tokens to the moment their SSE chunk was written to the client's connection.

Decision on `_created` series: vLLM V1 emits them; we do not. In the Prometheus text format
they appear as separate gauge families (`..._created`) that double the series count and
read as metrics of their own; vLLM V0 switched them off too. They are filtered from this
registry's output only (prometheus_client's switch for them is process-global).

Thread safety: everything is observed and rendered on the event loop's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from reference_engine.core.messages import CoreStats
from reference_engine.server.timing import SequenceTimes
from reference_engine.server.token_histogram import TokenHistogram

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
# Server-side write delay: sub-millisecond resolution where a healthy server sits.
WRITE_DELAY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.003,
    0.004,
    0.005,
    0.0075,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    1.0,
)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
# vLLM's KV_CACHE_RESIDENCY_BUCKETS (vllm/v1/metrics/buckets.py), for --kv-cache-metrics
KV_CACHE_RESIDENCY_BUCKETS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800,
)  # fmt: skip
_SAMPLED = " Sampled metrics (controlled by --kv-cache-metrics-sample)."
# residency kind (reference_engine.kv_residency) -> (family, HELP), as vLLM 0.33 names them
RESIDENCY_FAMILIES = {
    "lifetime": (
        "vllm:kv_block_lifetime_seconds",
        "Histogram of KV cache block lifetime from allocation to eviction." + _SAMPLED,
    ),
    "idle_before_evict": (
        "vllm:kv_block_idle_before_evict_seconds",
        "Histogram of idle time before KV cache block eviction." + _SAMPLED,
    ),
    "reuse_gap": (
        "vllm:kv_block_reuse_gap_seconds",
        "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent "
        "accesses are recorded (ring buffer)." + _SAMPLED,
    ),
}
FINISH_REASONS = ("stop", "length", "abort")


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's token-count buckets)."""
    buckets, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def cache_config_labels(
    block_size: int, num_gpu_blocks: int, cache_dtype: str, enable_prefix_caching: bool, allocator: str
) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels, as strings the way vLLM renders them ("True")."""
    return {
        "block_size": str(block_size),
        "num_gpu_blocks": str(num_gpu_blocks),
        "cache_dtype": cache_dtype,
        "enable_prefix_caching": str(enable_prefix_caching),
        "allocator": allocator,
    }


class FinishedSequence(SequenceTimes, Protocol):
    num_prompt_tokens: int
    num_output_tokens: int


@dataclass(frozen=True, slots=True)
class LiveGauges:
    """Readers for the scrape-time gauges; each must be cheap."""

    num_running: Callable[[], float]
    num_waiting: Callable[[], float]
    kv_usage: Callable[[], float]


class _WithoutCreated:
    """A collector view of a registry that drops `_created` samples (see the module doc)."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        for metric in self.registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric


class VllmMetrics:
    """One registry per server (no process-global registry), rendered by `render()`."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        cache_info: Mapping[str, str],
        live: LiveGauges,
        kv_cache_metrics: bool = False,
    ):
        """`kv_cache_metrics`: also the three residency histograms (only then, as vLLM)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self._view = _WithoutCreated(self.registry)
        labels = ("model_name", "engine")
        values = (model_name, "0")
        reg = self.registry

        def gauge(name: str, doc: str, fn: Callable[[], float]) -> None:
            Gauge(name, doc, labels, registry=reg).labels(*values).set_function(fn)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=reg).labels(*values)

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(name, doc, labels, buckets=tuple(buckets), registry=reg).labels(*values)

        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", live.num_running)
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", live.num_waiting)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", live.kv_usage)
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.num_preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*labels, "finished_reason"),
            registry=reg,
        )
        self.request_success = {r: success.labels(*values, r) for r in FINISH_REASONS}

        token_buckets = build_1_2_5_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKEN_BUCKETS,
        )
        self.request_num_preemptions = histogram(
            "vllm:request_num_preemptions", "Number of preemptions per finished request.", PREEMPTION_BUCKETS
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        # Observed per token per stream: a step's worth at a time (`token_histogram`).
        labelled = dict(zip(labels, values))
        self.itl = TokenHistogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labelled,
            ITL_BUCKETS,
            reg,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            (*cache_info.keys(), "engine"),
            registry=reg,
        )
        info.labels(*cache_info.values(), "0").set(1)
        self.write_delay = TokenHistogram(
            "kvscope:stream_write_delay_seconds",
            "Server-side delay from a step's tokens existing in the engine core to their SSE chunk "
            "being written.",
            labelled,
            WRITE_DELAY_BUCKETS,
            reg,
        )
        self.residency = (
            {
                kind: histogram(name, doc, KV_CACHE_RESIDENCY_BUCKETS)
                for kind, (name, doc) in RESIDENCY_FAMILIES.items()
            }
            if kv_cache_metrics
            else {}
        )
        self._last = CoreStats()

    def observe_stats(self, stats: CoreStats) -> None:
        """Advance the counters by what the engine did since the previous record."""
        for tokens in stats.step_tokens:
            self.iteration_tokens.observe(tokens)
        last = self._last
        for counter, now, before in (
            (self.prompt_tokens, stats.prompt_tokens, last.prompt_tokens),
            (self.generation_tokens, stats.generation_tokens, last.generation_tokens),
            (self.num_preemptions, stats.num_preemptions, last.num_preemptions),
            (self.prefix_cache_queries, stats.prefix_cache_queries, last.prefix_cache_queries),
            (self.prefix_cache_hits, stats.prefix_cache_hits, last.prefix_cache_hits),
        ):
            if now > before:
                counter.inc(now - before)
        self._last = stats
        for kind, seconds in stats.residency:
            if kind in self.residency:
                self.residency[kind].observe(seconds)

    def observe_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def observe_inter_tokens(self, seconds: Collection[float]) -> None:
        self.itl.observe_many(seconds)

    def observe_write_delays(self, seconds: Collection[float]) -> None:
        self.write_delay.observe_many(seconds)

    def observe_finished(self, seq: FinishedSequence, reason: str) -> None:
        """One finished sequence. Stages it never reached (an abort while queued) are skipped."""
        self.request_success[reason if reason in self.request_success else "abort"].inc()
        if seq.finished_time is None:
            return
        self.e2e.observe(seq.finished_time - seq.arrival_time)
        self.request_prompt_tokens.observe(seq.num_prompt_tokens)
        self.request_generation_tokens.observe(seq.num_output_tokens)
        self.request_num_preemptions.observe(seq.num_preemptions)
        if seq.first_scheduled_time is not None:
            self.queue_time.observe(seq.first_scheduled_time - seq.arrival_time)
            self.inference_time.observe(seq.finished_time - seq.first_scheduled_time)
            if seq.first_token_time is not None:
                self.prefill_time.observe(seq.first_token_time - seq.first_scheduled_time)
                self.decode_time.observe(seq.finished_time - seq.first_token_time)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self._view), CONTENT_TYPE_LATEST
