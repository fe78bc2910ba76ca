"""The results bundle on disk: its schema (columns derived from the request record and the
exporter's canonical quantities, the deployment facts of run.json), the writer that turns a
run's raw JSON lines into it, and the one reader every consumer goes through.

`harness.results.load(path)` is the public entry point; inside kvscope, analysis, reports,
the advisor and sweeps read with `harness.bundle.read`. This is the only package that opens
requests.parquet. May import: pandas, pyarrow, `harness.workload` (the record), `exporter`
(the quantities) and `reference_engine.config` (the types deployment facts are checked against).
"""
