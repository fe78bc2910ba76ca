"""Live advice: a running exporter's recent samples -> verdicts, without replays.

Reads `/api/v1/samples?since=T` (every target, every engine instance), diagnoses each
instance's window with the same rules as a finished run (`diagnose`), and turns the
diagnosis into verdicts whose projected effects need only what the samples say: the KV
dtype and gpu_memory_utilization (from vLLM's cache_config_info when the engine has it) and
the pool size. Sizing a larger deployment and verifying by replay need the run's requests:
the verdicts say so and point at `kvscope advise DIR`. Nothing is verified live.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from harness.advisor.diagnose import WindowDiagnosis, diagnose_window, windows_from_samples_api
from harness.advisor.errors import AdvisorError
from reference_engine.catalogue import CatalogueError, kv_dtype_bytes

DEFAULT_WINDOW_S = 300.0
NEEDS_BUNDLE = "size it and verify it with `kvscope advise DIR` on a run's bundle"


@dataclass(frozen=True, slots=True)
class LiveVerdict:
    target: str
    model: str
    instance: str
    action: str
    title: str
    evidence: dict[str, Any]
    effect: str
    verified: bool = False


def fetch_samples(
    url: str, window_s: float = DEFAULT_WINDOW_S, timeout_s: float = 10.0, now: float | None = None
) -> dict[str, Any]:
    """GET EXPORTER_URL/api/v1/samples for the last `window_s` seconds."""
    since = (time.time() if now is None else now) - window_s
    full = url.rstrip("/") + "/api/v1/samples?" + urllib.parse.urlencode({"since": f"{since:.3f}"})
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as resp:  # noqa: S310 (operator-given URL)
            return json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AdvisorError(f"cannot read samples from {full}: {exc}") from None


def _element_bytes(dtype: str | None) -> int | None:
    if not dtype:
        return None
    try:
        return kv_dtype_bytes(dtype)
    except CatalogueError:
        return None


def verdicts_for(d: WindowDiagnosis, window: list) -> list[LiveVerdict]:
    last = window[-1][1]
    ev = {k: v for k, v in d.numbers().items() if v is not None}
    ev["preemption_level"] = d.preemption_level
    out: list[LiveVerdict] = []

    def add(action: str, title: str, effect: str, **extra: Any) -> None:
        out.append(LiveVerdict(d.target, d.model, d.instance, action, title, {**ev, **extra}, effect))

    if d.kv_pressure:
        width = _element_bytes(last.kv_cache_dtype)
        if width is None or width > 1:
            factor = f"x{width}" if width else "about x2 from 16-bit"
            add(
                "quantize_kv_cache",
                "Quantize the KV cache to fp8",
                f"an fp8 cache holds {factor} the tokens in the same memory "
                f"(now {last.kv_cache_dtype or 'unknown dtype'}); {NEEDS_BUNDLE}",
                kv_cache_dtype=last.kv_cache_dtype,
            )
        add(
            "add_memory",
            "Add KV memory",
            f"the pool of {last.kv_capacity_blocks or 'unknown'} blocks is too small "
            f"for this load; {NEEDS_BUNDLE}",
            kv_capacity_blocks=last.kv_capacity_blocks,
        )
        gmu = last.gpu_memory_utilization
        if gmu is not None and gmu < 0.9:
            add(
                "raise_memory_utilization",
                "Raise gpu_memory_utilization to 0.9",
                f"gpu_memory_utilization is {gmu:g}; more of the GPU for the KV cache",
                gpu_memory_utilization=gmu,
            )
        if d.exporter_advice.get("cut_context"):
            add("cut_context", "Cut max_model_len", d.exporter_reasons["cut_context"] + f"; {NEEDS_BUNDLE}")
    elif d.kv_not_bottleneck:
        add(
            "kv_not_bottleneck",
            "The KV cache is not the bottleneck",
            f"requests waited in {d.waiting_share or 0:.0%} of the window while KV usage peaked at "
            f"{d.max_usage or 0:.0%}: look at max_num_seqs, the token budget or compute",
        )
    return out


def live_advice(
    url: str, window_s: float = DEFAULT_WINDOW_S, payload: dict[str, Any] | None = None
) -> list[tuple[WindowDiagnosis, list[LiveVerdict]]]:
    """(diagnosis, verdicts) per engine instance the exporter watches."""
    data = fetch_samples(url, window_s) if payload is None else payload
    out = []
    for (target, _, _), window in sorted(windows_from_samples_api(data).items()):
        d = diagnose_window(window, target)
        out.append((d, verdicts_for(d, window)))
    return out


def render_live(results: list[tuple[WindowDiagnosis, list[LiveVerdict]]]) -> str:
    if not results:
        return "no samples from any engine in the window (is the exporter scraping a target?)\n"
    lines = []
    for d, verdicts in results:
        lines.append(
            f"{d.target} model={d.model} instance={d.instance}: "
            f"{d.points} samples over {d.duration_s:.0f} s, "
            f"preemption level {d.preemption_level}, KV pressure {'yes' if d.kv_pressure else 'no'}"
        )
        if not verdicts:
            lines.append("  no change advised")
        for v in verdicts:
            lines.append(f"  - {v.action}: {v.title} — {v.effect}")
    return "\n".join(lines) + "\n"
