"""What a server states about its KV pool, each figure with where it was read.

- vLLM (and the bundled engine, which speaks its dialect): `vllm:cache_config_info`'s labels,
  `num_gpu_blocks` (the null block included) and `block_size`; vLLM 0.11+ also labels its
  start-up figures `kv_cache_size_tokens` and `kv_cache_max_concurrency` ("Maximum
  concurrency for N tokens per request", which assumes every request at max_model_len).
- llama.cpp: `GET /slots`, each slot's `n_ctx` (a slot holds one request of up to n_ctx
  tokens; with a unified pool every slot reports the whole pool).
- `/v1/models`: max_model_len (vLLM, the bundled engine), llama.cpp's `meta.n_ctx_train`.

Pure functions of the replies; the fetch is `live`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from exporter.dialects.common import FamilyIndex
from exporter.parse import Exposition

CACHE_CONFIG = "vllm_cache_config_info"  # FamilyIndex's normalised family name


@dataclass(frozen=True, slots=True)
class StatedPool:
    """The pool as the server describes it (None: not stated)."""

    dialect: str | None = None
    num_blocks: int | None = None  # vLLM's num_gpu_blocks: the null block included
    block_size: int | None = None
    max_model_len: int | None = None
    size_tokens: int | None = None  # vLLM's kv_cache_size_tokens
    max_concurrency: float | None = None  # vLLM's kv_cache_max_concurrency, at max_model_len
    slots: tuple[int, ...] = ()  # llama.cpp: each slot's n_ctx
    slot_layout: str | None = None  # llama.cpp: "unified" or "per-slot"
    source: str = ""

    @property
    def capacity_tokens(self) -> int | None:
        """The pool's size in tokens, as stated: vLLM's own figure, else blocks x block size,
        else llama.cpp's slots (their sum, or one slot's n_ctx for a unified pool)."""
        if self.size_tokens:
            return self.size_tokens
        if self.num_blocks and self.block_size:
            return self.num_blocks * self.block_size
        if self.slots:
            return max(self.slots) if self.slot_layout == "unified" else sum(self.slots)
        return None

    @property
    def capacity_source(self) -> str | None:
        if self.size_tokens:
            return "vllm:cache_config_info kv_cache_size_tokens"
        if self.num_blocks and self.block_size:
            return "vllm:cache_config_info num_gpu_blocks x block_size"
        if self.slots:
            layout = self.slot_layout or "per-slot"
            return f"/slots n_ctx ({layout} pool)"
        return None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["capacity_tokens"] = self.capacity_tokens
        d["capacity_source"] = self.capacity_source
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StatedPool:
        kw = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        kw["slots"] = tuple(kw.get("slots") or ())
        return cls(**kw)


def _int(text: Any) -> int | None:
    try:
        value = int(float(text))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _float(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def cache_config(exp: Exposition) -> dict[str, Any]:
    """vLLM's cache_config_info labels as numbers (empty when the family is absent)."""
    rows = FamilyIndex(exp).rows(CACHE_CONFIG)
    if not rows:
        return {}
    labels = rows[0][0]
    return {
        "num_blocks": _int(labels.get("num_gpu_blocks")),
        "block_size": _int(labels.get("block_size")),
        "size_tokens": _int(labels.get("kv_cache_size_tokens")),
        "max_concurrency": _float(labels.get("kv_cache_max_concurrency")),
    }


def model_card(models: Any, requested: str | None = None) -> dict[str, Any]:
    """The /v1/models card of the requested model, else the first listed ({} when none)."""
    cards = models.get("data") if isinstance(models, dict) else None
    cards = [c for c in cards if isinstance(c, dict)] if isinstance(cards, list) else []
    return next((c for c in cards if c.get("id") == requested), cards[0] if cards else {})


def slot_contexts(slots: Any) -> tuple[int, ...]:
    """llama.cpp's /slots: each slot's n_ctx (empty when the reply is not a slot list)."""
    if not isinstance(slots, list):
        return ()
    sizes = tuple(_int(s.get("n_ctx")) for s in slots if isinstance(s, dict))
    return () if not sizes or any(n is None for n in sizes) else sizes  # type: ignore[return-value]


def stated_pool(
    dialect: str | None,
    exp: Exposition,
    card: dict[str, Any],
    slots: Any = None,
    slot_layout: str | None = None,
) -> StatedPool:
    """Everything the replies state about the pool."""
    cc = cache_config(exp)
    limit = _int(card.get("max_model_len"))
    sizes = slot_contexts(slots)
    if limit is None and sizes:  # llama.cpp: a request is bounded by its slot's context
        limit = max(sizes) if slot_layout == "unified" else min(sizes)
    sources = [
        s for s, ok in (("vllm:cache_config_info", cc), ("/v1/models", limit), ("/slots", sizes)) if ok
    ]
    return StatedPool(
        dialect=dialect,
        num_blocks=cc.get("num_blocks"),
        block_size=cc.get("block_size"),
        max_model_len=limit,
        size_tokens=cc.get("size_tokens"),
        max_concurrency=cc.get("max_concurrency"),
        slots=sizes,
        slot_layout=slot_layout if sizes else None,
        source=", ".join(sources),
    )
