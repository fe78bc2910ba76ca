"""The results bundle on disk: its schema (columns derived from the request record and the
exporter's canonical quantities, the deployment facts of run.json, the coded findings its
JSON files hold: `finding`, `finding_codes`), the writer that turns a
run's raw JSON lines into it, its JSON files, and the one reader (`read.read_bundle`, a
`Bundle`, a `BundleError`) that analysis, reports, the advisor and `harness.results.load`
all go through — the only code that opens requests.parquet. May import pandas, pyarrow,
`harness.workload` (the record), `exporter.quantities` and `reference_engine.config` (the
types deployment facts are checked against).
"""
