"""llama.cpp's per-request `timings` object, in the reference engine's `kvscope` terms.

llama-server puts `timings` in the last data chunk of every streamed response
(docs/reference/llamacpp-server.md): `prompt_ms` runs from the slot's first prompt batch to
the first sampled token, `predicted_ms` from there to the last token, `cache_n` counts the
prompt tokens reused from the cache. Its clock starts when a slot takes the request, so the
time spent waiting for a slot (deferred), tokenising or in HTTP is in none of them: the
result has no `queue_time_s`, and its `ttft_s` / `e2e_s` are the server's time from the slot's
start, the client's minus the wait for a slot and transport. llama.cpp does not preempt, so
there is no preemption count either. Stdlib only.
"""

from __future__ import annotations

from typing import Any

SOURCE = "llamacpp"


def _ms(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value) / 1000.0
    return None


def as_server_timing(timings: dict[str, Any]) -> dict[str, Any]:
    """The keys `RequestRecord.apply_server_timing` reads; absent where llama.cpp says nothing."""
    prefill, decode = _ms(timings.get("prompt_ms")), _ms(timings.get("predicted_ms"))
    out: dict[str, Any] = {"source": SOURCE}
    if prefill is not None:
        out["prefill_time_s"] = out["ttft_s"] = prefill
        if decode is not None:
            out["decode_time_s"], out["e2e_s"] = decode, prefill + decode
    cached = timings.get("cache_n")
    if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0:
        out["cached_prompt_tokens"] = cached
    return out
