"""Load a results bundle for analysis: `load("runs/20261129-120000-chat")`.

    from harness.results import load
    r = load("runs/x")
    r.measured.groupby("error_class").size()
    r.server.plot(x="time_unix", y="kv_usage_ratio")

`requests` has one row per request (schema: `harness.workload.record.RequestRecord`;
`itl_s` is a list per row), `measured` the requests that count (calibration probes
excluded), `server` one row per exporter sample (time_unix, target, model, instance, up and
every canonical quantity), `run` and `summary` the JSON files as dicts. A folder that is not
a complete bundle raises `harness.bundle.errors.BundleError`.
"""

from __future__ import annotations

from pathlib import Path

from harness.bundle.read import Bundle, read_bundle
from harness.bundle.schema import REQUIRED_FILES, SUMMARY


def load(path: str | Path) -> Bundle:
    return read_bundle(path, (*REQUIRED_FILES, SUMMARY))
