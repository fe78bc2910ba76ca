"""llama.cpp's probe: KV occupancy and capacity from GET /slots (docs/reference/llamacpp-server.md).

- Tokens held = Σ `n_prompt_tokens` over busy slots (`is_processing`): the slot's sequence,
  prompt plus tokens generated so far. Idle slots may keep a cached prefix that /slots does
  not report; like vLLM's cached blocks that no request holds, it counts as free.
- Capacity: with one KV pool per slot (an explicit `-np N`) the pool is Σ `n_ctx`; with a
  unified pool (`-kvu`, or `-np` left at auto) every slot reports the whole pool as its
  `n_ctx`, so the pool is one slot's `n_ctx`. No endpoint says which. "auto" takes unified
  when several slots each report the model's training context (`n_ctx_train` in
  /v1/models), which is what llama-server's defaults give, and per-slot otherwise; the note
  says which was assumed and how to state it (`--llamacpp-kv-layout`).
"""

from __future__ import annotations

from typing import Any

from exporter.dialects.probe import Probe, ProbeSettings, Replies
from exporter.dialects.sample import Normalised

SLOTS = "/slots"
MODELS = "/v1/models"


def _n_ctx_train(body: Any) -> int | None:
    cards = body.get("data") if isinstance(body, dict) else None
    meta = cards[0].get("meta") if isinstance(cards, list) and cards and isinstance(cards[0], dict) else None
    value = meta.get("n_ctx_train") if isinstance(meta, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _layout(slots: list[dict], settings: ProbeSettings, n_ctx_train: int | None) -> tuple[str, str]:
    """(unified | per-slot, why)."""
    if settings.llamacpp_kv_layout != "auto":
        return settings.llamacpp_kv_layout, "as stated (--llamacpp-kv-layout)"
    sizes = {s.get("n_ctx") for s in slots}
    if len(slots) > 1 and n_ctx_train is not None and sizes == {n_ctx_train}:
        return "unified", f"{len(slots)} slots each report the training context {n_ctx_train} (-np auto)"
    return "per-slot", "the slots do not each report the training context (explicit -np)"


def apply(out: Normalised, replies: Replies, settings: ProbeSettings) -> None:
    reply = replies.get(SLOTS)
    if reply is None or reply.error is not None:
        why = reply.error if reply is not None else "not fetched"
        out.notes.append(
            f"KV usage and capacity unknown: GET /slots failed ({why}); llama-server serves it "
            "unless started with --no-slots"
        )
        return
    slots = [s for s in reply.body if isinstance(s, dict)] if isinstance(reply.body, list) else []
    sizes = [_int(s.get("n_ctx")) for s in slots]
    if not slots or any(n is None or n == 0 for n in sizes):
        out.notes.append("KV usage and capacity unknown: GET /slots did not list slots with n_ctx")
        return
    models = replies.get(MODELS)
    layout, why = _layout(slots, settings, _n_ctx_train(models.body if models else None))
    capacity = max(sizes) if layout == "unified" else sum(sizes)  # type: ignore[type-var, arg-type]
    busy = [s for s in slots if s.get("is_processing") is True]
    held = [_int(s.get("n_prompt_tokens")) for s in busy]
    for s in out.instances:
        s.kv_capacity_tokens = float(capacity)
        if all(h is not None for h in held):
            s.kv_usage_ratio = min(1.0, sum(held) / capacity)  # type: ignore[arg-type]
    if any(h is None for h in held):
        out.notes.append("KV usage unknown: a busy slot in GET /slots has no n_prompt_tokens")
    out.notes.append(
        f"KV from GET /slots: tokens of busy slots over a {layout} pool of {capacity:,} tokens "
        f"({why}; state it with --llamacpp-kv-layout unified|per-slot)"
    )


PROBE = Probe((SLOTS, MODELS), "KV usage and capacity", apply)
