"""The server's request spans in the bundle: `spans.parquet`, and their join to the requests.

The receiver (`harness.otlp`) leaves `raw/otlp/spans.jsonl` (one `ServerSpan` per line) and
`raw/otlp/counts.json`; the writer turns them into `spans.parquet` (schema from `ServerSpan`)
and run.json's `spans` (what the receiver counted, and how the join went). The reader joins
spans to requests by trace id (`fill_from_spans`).

Join rules (what is not matched is counted, never guessed):
- A request span joins the request whose `trace_id` it carries. Several request spans with
  one trace id (an engine's retry, n > 1 choices traced one by one) keep the first to end;
  the others are counted `extra_same_trace`.
- SGLang's request root has no queue time; the durations of its trace's `prefill_waiting`
  stage spans are summed into it.
- A request's `server_*` values come from its span only when the server sent no timing of
  its own in the stream (`server_timing_source` empty): the SSE object is the server's
  word on the same request, and both are kept (`spans.parquet`) for comparison.
- `missing`: successful requests with a trace id and no span; `unknown_trace`: request spans
  whose trace id no request has (another client's traffic, or a request kvscope never saw).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.bundle.schema import arrow_schema
from harness.otlp.sink import COUNTS_FILE, SPANS_FILE
from harness.otlp.span import SPAN_COLUMNS, ServerSpan

SPANS = "spans.parquet"
RAW_DIR = Path("raw") / "otlp"  # under the bundle: what the receiver wrote
SPAN_SCHEMA = arrow_schema(ServerSpan)
# requests.parquet column <- ServerSpan field, for requests without the server's SSE timing
FILLED = {
    "server_queue_time_s": "queue_time_s",
    "server_prefill_time_s": "prefill_time_s",
    "server_ttft_s": "ttft_s",
    "server_decode_time_s": "decode_time_s",
    "server_e2e_s": "e2e_s",
    "server_num_preemptions": "num_preemptions",
    "server_cached_prompt_tokens": "cached_prompt_tokens",
    "server_arrival_unix": "start_unix",
}


def read_raw_spans(raw_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    path = raw_dir / SPANS_FILE
    if not path.exists():
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill mid-write
            if isinstance(row, dict):
                rows.append(row)
    return rows


def spans_table(rows: list[dict[str, Any]]) -> pa.Table:
    cols = {name: [r.get(name) for r in rows] for name in SPAN_COLUMNS}
    for name, kind in zip(SPAN_SCHEMA.names, SPAN_SCHEMA.types):
        if kind == pa.float64():
            cols[name] = [math.nan if v is None else float(v) for v in cols[name]]
    return pa.table(cols, schema=SPAN_SCHEMA)


def empty_spans() -> pd.DataFrame:
    return SPAN_SCHEMA.empty_table().to_pandas()


def request_spans(spans: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """One request span per trace id (SGLang's queue stage merged in), and how many request
    spans were dropped as extra ones of an already-represented trace."""
    if spans.empty:
        return spans, 0
    req = spans[spans["role"] == "request"].sort_values("end_unix", kind="stable")
    first = req.drop_duplicates("trace_id", keep="first").copy()
    stage = spans[spans["role"] == "queue_stage"].groupby("trace_id")["queue_time_s"].sum()
    if len(stage):
        add = first["trace_id"].map(stage)
        use = first["queue_time_s"].isna() & add.notna()
        first.loc[use, "queue_time_s"] = add[use]
    return first, len(req) - len(first)


def join_stats(requests: pd.DataFrame, spans: pd.DataFrame) -> dict[str, int]:
    first, extra = request_spans(spans)
    traced = requests[requests["trace_id"].notna()] if "trace_id" in requests.columns else requests.iloc[:0]
    ok = traced[traced["ok"].fillna(False).astype(bool)]
    ids = set(first["trace_id"]) if len(first) else set()
    known = set(traced["trace_id"])
    return {
        "requests_traced": len(traced),
        "ok_traced": len(ok),
        "joined": int(ok["trace_id"].isin(ids).sum()),
        "joined_failed_requests": int((traced["trace_id"].isin(ids) & ~traced.index.isin(ok.index)).sum()),
        "missing": int((~ok["trace_id"].isin(ids)).sum()),
        "unknown_trace": len(ids - known),
        "extra_same_trace": extra,
    }


def write_spans(out: Path, requests: pd.DataFrame) -> dict[str, Any] | None:
    """spans.parquet from raw/otlp, and run.json's `spans` record; None when the run had
    no receiver."""
    raw = out / RAW_DIR
    if not raw.is_dir():
        return None
    rows = read_raw_spans(raw)
    table = spans_table(rows)
    pq.write_table(table, out / SPANS)
    counts_path = raw / COUNTS_FILE
    try:
        counts = json.loads(counts_path.read_text(encoding="utf-8")) if counts_path.exists() else None
    except ValueError:
        counts = None
    return {"receiver": counts, "join": join_stats(requests, table.to_pandas())}


def fill_from_spans(requests: pd.DataFrame, spans: pd.DataFrame) -> pd.DataFrame:
    """`requests` with `server_*` taken from the joined span where the stream carried no
    server timing; `server_timing_source` says "otlp:<format>" for those."""
    if spans.empty or "trace_id" not in requests.columns:
        return requests
    first, _ = request_spans(spans)
    by_trace = first.set_index("trace_id")
    source = requests["server_timing_source"]
    want = (source.isna() | (source == "")) & requests["trace_id"].isin(by_trace.index)
    if not want.any():
        return requests
    out = requests.copy()
    ids = out.loc[want, "trace_id"]
    for column, field in FILLED.items():
        values = ids.map(by_trace[field])
        if out[column].dtype.kind == "f":
            out.loc[want, column] = pd.to_numeric(values, errors="coerce").astype(float)
        else:  # integer counts that may be missing: object, None where absent
            out[column] = out[column].astype(object)
            out.loc[want, column] = values.astype(object).where(values.notna(), None)
    out.loc[want, "server_timing_source"] = "otlp:" + ids.map(by_trace["engine_format"]).astype(str)
    return out


def source_counts(requests: pd.DataFrame) -> dict[str, int]:
    """Successful requests by where their server timing came from ("none": nowhere)."""
    ok = requests[requests["ok"]]
    src = ok["server_timing_source"].where(ok["server_timing_source"].notna(), "none")
    return {str(k): int(v) for k, v in src.value_counts().items()}
