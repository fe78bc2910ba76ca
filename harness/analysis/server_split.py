"""Where the server spent each request's time, by client latency band: queue, prefill and
decode (the server's own per-request figures), and where each figure came from.

Bands are on the client's E2E among successful measured requests that have server timings:
up to p50, p50-p90, p90-p99, above p99. A slow band whose queue share is high points at
admission (KV capacity, batch limits); one dominated by decode at output length or
preemption. Medians per band; a band without requests is left out.

Sources (`server_timing_source`): "kvscope" (the reference engine's SSE object), "llamacpp"
(its `timings`: no queue time), "otlp:<format>" (a joined span, `bundle.spans`); each is
described with the attribute names the spans actually carried, so every server figure in
the report names its origin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.bundle.read import measured

BANDS: tuple[tuple[str, float, float], ...] = (
    ("≤ p50", 0.0, 50.0),
    ("p50–p90", 50.0, 90.0),
    ("p90–p99", 90.0, 99.0),
    ("> p99", 99.0, 100.0),
)
SOURCE_TEXT = {
    "unrecorded": "the stream's own timing object (a bundle from before sources were recorded)",
    "kvscope": "the reference engine's SSE kvscope object",
    "llamacpp": "llama.cpp's timings object (no queue time)",
}
SPAN_TEXT = {
    "vllm": "OTLP span llm_request (vLLM attributes)",
    "sglang": "OTLP span: SGLang request root (queue = prefill_waiting spans)",
    "tgi": "OTLP span: TGI handler span (Duration strings; no TTFT, prefill or decode)",
}


@dataclass(frozen=True, slots=True)
class SplitRow:
    band: str
    requests: int
    e2e_p50_s: float | None
    queue_p50_s: float | None
    prefill_p50_s: float | None
    decode_p50_s: float | None
    queue_share_p50: float | None  # of the server's E2E


@dataclass(frozen=True, slots=True)
class ServerSplit:
    rows: list[SplitRow] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)  # ok requests per source ("none" included)
    source_text: dict[str, str] = field(default_factory=dict)  # source -> what it is, attribute names

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").to_numpy(float)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else None


def describe_sources(sources: list[str], spans: pd.DataFrame) -> dict[str, str]:
    out = {}
    for source in sources:
        if source.startswith("otlp:"):
            fmt = source.removeprefix("otlp:")
            names: set[str] = set()
            if not spans.empty:
                for cell in spans.loc[spans["engine_format"] == fmt, "attributes"].dropna().unique():
                    names.update(n for n in str(cell).split(",") if n)
            text = SPAN_TEXT.get(fmt, f"OTLP span ({fmt})")
            out[source] = f"{text}: {', '.join(sorted(names))}" if names else text
        elif source != "none":
            out[source] = SOURCE_TEXT.get(source, source)
    return out


def server_split(all_requests: pd.DataFrame, spans: pd.DataFrame) -> ServerSplit:
    ok = measured(all_requests)
    ok = ok[ok["ok"]]
    # Bundles from before the source was recorded have server timings without one.
    unrecorded = ok["server_ttft_s"].notna() | ok["server_e2e_s"].notna()
    src = ok["server_timing_source"].where(
        ok["server_timing_source"].notna(), unrecorded.map({True: "unrecorded", False: "none"})
    )
    sources = {str(k): int(v) for k, v in src.value_counts().items()}
    timed = ok[ok["server_e2e_s"].notna() & ok["e2e_s"].notna()]
    rows = []
    if len(timed):
        e2e = timed["e2e_s"].to_numpy(float)
        for label, lo, hi in BANDS:
            lo_v, hi_v = np.percentile(e2e, lo), np.percentile(e2e, hi)
            part = timed[(e2e >= lo_v) & (e2e <= hi_v)] if lo == 0 else timed[(e2e > lo_v) & (e2e <= hi_v)]
            if part.empty:
                continue
            share = part["server_queue_time_s"] / part["server_e2e_s"].where(part["server_e2e_s"] > 0)
            rows.append(
                SplitRow(
                    label,
                    len(part),
                    _median(part["e2e_s"]),
                    _median(part["server_queue_time_s"]),
                    _median(part["server_prefill_time_s"]),
                    _median(part["server_decode_time_s"]),
                    _median(share),
                )
            )
    return ServerSplit(rows, sources, describe_sources(list(sources), spans))
