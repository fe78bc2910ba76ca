"""Synthetic vLLM V1 expositions, written by the real prometheus_client like vLLM's own.

Used by the benchmark (a 2,000-line multi-engine exposition), by tests that need a server
whose counters move, and by demos. Families, labels and buckets follow vLLM V1's
`PrometheusStatLogger` (0.10-0.11 era: both KV-usage names, `_created` series, one series
per `engine`, `cache_config_info`). Deterministic for a given state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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
REQUEST_BUCKETS = (
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
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def buckets_1_2_5(limit: int) -> list[int]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to `limit`."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > limit:
                return out
            out.append(v)
        exp += 1


@dataclass(slots=True)
class EngineState:
    """Cumulative state of one synthetic engine core. Counters only ever grow."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    finished: dict[str, float] = field(default_factory=lambda: {"stop": 0.0, "length": 0.0, "abort": 0.0})
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)


def vllm_v1_exposition(
    engines: Sequence[EngineState],
    model: str = "meta-llama/Llama-3.1-8B-Instruct",
    num_gpu_blocks: int = 8192,
    block_size: int = 16,
    cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.9,
    max_model_len: int = 8192,
    legacy_names: bool = True,
    openmetrics: bool = False,
) -> str:
    """Text 0.0.4 (or OpenMetrics) exposition of `engines` (engine label = position)."""
    reg = CollectorRegistry()
    lbl = ["model_name", "engine"]
    g_run = Gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", lbl, registry=reg
    )
    g_wait = Gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", lbl, registry=reg
    )
    g_kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lbl, registry=reg)
    g_old = (
        Gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: "
            "Use vllm:kv_cache_usage_perc instead.",
            lbl,
            registry=reg,
        )
        if legacy_names
        else None
    )
    c_q = Counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        lbl,
        registry=reg,
    )
    c_h = Counter(
        "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", lbl, registry=reg
    )
    c_pre = Counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", lbl, registry=reg
    )
    c_pt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lbl, registry=reg)
    c_gt = Counter("vllm:generation_tokens", "Number of generation tokens processed.", lbl, registry=reg)
    c_ok = Counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        lbl + ["finished_reason"],
        registry=reg,
    )
    hists = {
        "ttft": Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            lbl,
            buckets=TTFT_BUCKETS,
            registry=reg,
        ),
        "itl": Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            lbl,
            buckets=ITL_BUCKETS,
            registry=reg,
        ),
        "e2e": Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            lbl,
            buckets=REQUEST_BUCKETS,
            registry=reg,
        ),
        "queue": Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            lbl,
            buckets=REQUEST_BUCKETS,
            registry=reg,
        ),
    }
    extra = [
        Histogram(
            f"vllm:request_{p}_time_seconds",
            f"Histogram of time spent in {p.upper()} phase.",
            lbl,
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        for p in ("inference", "prefill", "decode")
    ]
    tok_buckets = buckets_1_2_5(max_model_len)
    extra += [
        Histogram(
            f"vllm:request_{n}_tokens",
            f"Number of {n} tokens processed.",
            lbl,
            buckets=tok_buckets,
            registry=reg,
        )
        for n in ("prompt", "generation")
    ]
    extra.append(
        Histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            lbl,
            buckets=ITERATION_BUCKETS,
            registry=reg,
        )
    )
    info = Gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        [
            "block_size",
            "cache_dtype",
            "enable_prefix_caching",
            "gpu_memory_utilization",
            "num_cpu_blocks",
            "num_gpu_blocks",
            "engine",
        ],
        registry=reg,
    )
    for i, st in enumerate(engines):
        lv = (model, str(i))
        g_run.labels(*lv).set(st.running)
        g_wait.labels(*lv).set(st.waiting)
        g_kv.labels(*lv).set(st.kv_usage)
        if g_old is not None:
            g_old.labels(*lv).set(st.kv_usage)
        c_q.labels(*lv).inc(st.prefix_queries)
        c_h.labels(*lv).inc(st.prefix_hits)
        c_pre.labels(*lv).inc(st.preemptions)
        c_pt.labels(*lv).inc(st.prompt_tokens)
        c_gt.labels(*lv).inc(st.generation_tokens)
        for reason, n in st.finished.items():
            c_ok.labels(*lv, reason).inc(n)
        for key, h in hists.items():
            child = h.labels(*lv)
            for v in getattr(st, key):
                child.observe(v)
        for h in extra:
            h.labels(*lv)
        info.labels(
            str(block_size),
            cache_dtype,
            "True",
            str(gpu_memory_utilization),
            "0",
            str(num_gpu_blocks),
            str(i),
        ).set(1)
    if openmetrics:
        from prometheus_client.openmetrics.exposition import generate_latest as generate_om

        return generate_om(reg).decode()
    return generate_latest(reg).decode()


def demo_engines(n: int, step: int = 0) -> list[EngineState]:
    """`n` engines whose counters grow with `step` (one step ~ one second of serving)."""
    out = []
    for i in range(n):
        s = step + 1
        out.append(
            EngineState(
                running=8 + i,
                waiting=i % 3,
                kv_usage=min(1.0, 0.3 + 0.01 * s + 0.05 * i),
                prefix_queries=4000.0 * s,
                prefix_hits=1500.0 * s,
                preemptions=float(s // 10),
                prompt_tokens=4000.0 * s,
                generation_tokens=900.0 * s,
                finished={"stop": 3.0 * s, "length": 1.0 * s, "abort": 0.0},
                ttft=[0.05 * (1 + k % 7) for k in range(20)],
                itl=[0.02 * (1 + k % 5) for k in range(20)],
                e2e=[1.5 * (1 + k % 4) for k in range(20)],
                queue=[0.01 * k for k in range(20)],
            )
        )
    return out
