"""The bundle writer with no records or one: every column typed, the summary still written."""

from __future__ import annotations

import math

import pytest

from harness.workload.record import COLUMNS, RequestRecord


def _rec() -> RequestRecord:
    return RequestRecord("w-1", "w", "chat", "chat", send_time_unix=0.0)


def _summary_of(directory, records: list[dict]) -> dict:
    """The bundle's summary as `kvscope run` writes it (harness.analysis.summary)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from harness.analysis.summary import write_summary
    from harness.bundle.write import requests_table

    directory.mkdir()
    pq.write_table(requests_table(records), directory / "requests.parquet")
    pd.DataFrame({"up": pd.Series(dtype=bool)}).to_parquet(directory / "server.parquet")
    (directory / "run.json").write_text("{}")
    return write_summary(directory)


def test_summary_and_bundle_schema_with_no_records(tmp_path) -> None:
    from harness.bundle.write import requests_table

    table = requests_table([])
    assert table.schema.names == list(COLUMNS) and table.num_rows == 0
    s = _summary_of(tmp_path / "empty", [])
    assert s["client"]["requests"] == 0 and s["headline"]["ttft_p50_s"] is None
    rec = _rec()
    rec.ok, rec.ttft_s, rec.e2e_s, rec.itl_s, rec.output_tokens, rec.server_ttft_s = (
        True,
        0.2,
        1.0,
        [0.1] * 8,
        9,
        0.15,
    )
    s = _summary_of(tmp_path / "one", [rec.to_dict()])
    assert s["client"]["ok"] == 1 and s["client"]["tpot_s"]["p50"] == pytest.approx(0.1)
    assert s["client"]["client_overhead_ttft_s"]["p50"] == pytest.approx(0.05)
    assert math.isclose(s["client"]["itl_s"]["p99"], 0.1)
