"""Which engine wrote an exposition: count the distinct family names per engine prefix.

Detection looks at declared names (HELP/TYPE) as well as samples, so an exposition whose
families are declared but never observed (vLLM V0 before the first request) is still
recognised. A gateway's `:` -> `_` rewrite is undone by `norm` before matching.
"""

from __future__ import annotations

from exporter.dialects.common import FamilyIndex

DIALECTS: tuple[str, ...] = ("vllm", "sglang", "trtllm", "tgi", "llamacpp", "lmdeploy")

PREFIXES: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm_",),
    "sglang": ("sglang_",),
    "trtllm": ("nv_trt_llm_", "trtllm_", "nv_llm_"),
    "tgi": ("tgi_",),
    "llamacpp": ("llamacpp_",),
    "lmdeploy": ("lmdeploy_",),
}

# trtllm-serve 1.0/1.1 (PR #5785) exposed these five families without any prefix.
UNPREFIXED_TRTLLM: frozenset[str] = frozenset(
    {
        "request_success_total",
        "e2e_request_latency_seconds",
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
        "request_queue_time_seconds",
    }
)


# Triton's general families; they name a TensorRT-LLM engine only through a model label.
TRITON_GENERAL = "nv_inference_"
TRTLLM_MODEL_MARKS = ("tensorrt_llm", "tensorrtllm", "trtllm", "trt_llm")


def trtllm_model(labels: dict[str, str]) -> bool:
    """Is this Triton series about a TensorRT-LLM model? tensorrtllm_backend's model
    repository names it `tensorrt_llm` (and `tensorrt_llm_bls`); renamed ones usually keep it."""
    name = labels.get("model", "").lower()
    return any(mark in name for mark in TRTLLM_MODEL_MARKS)


def _triton_trtllm(idx: FamilyIndex) -> bool:
    return any(
        name.startswith(TRITON_GENERAL) and any(trtllm_model(labels) for labels, _ in rows)
        for name, rows in idx.samples.items()
    )


def _base(name: str) -> str:
    for suffix in ("_bucket", "_count", "_sum", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def detect(idx: FamilyIndex) -> str:
    """Return one of DIALECTS, or "unknown" when no engine family is present."""
    names = idx.names()
    scores = {d: 0 for d in DIALECTS}
    for name in names:
        for dialect, prefixes in PREFIXES.items():
            if name.startswith(prefixes):
                scores[dialect] += 1
                break
    best = max(DIALECTS, key=lambda d: scores[d])
    if scores[best] > 0:
        return best
    if any(_base(n) in UNPREFIXED_TRTLLM or n in UNPREFIXED_TRTLLM for n in names):
        return "trtllm"
    if _triton_trtllm(idx):
        return "trtllm"
    return "unknown"
