"""`kvscope run` and `kvscope worker`: one typed `RunConfig` checked before anything starts,
the child processes (engine, exporter, Locust master and workers) and their command lines,
the live progress line, the orchestration from start to bundle, and the console summary.

Runs in the `kvscope` process, never inside Locust: it starts Locust as subprocesses and
reads what they write. May import: `harness.workload`, `harness.bundle`, `harness.analysis`,
`harness.formatting`, `exporter`, and `reference_engine` for its argument declarations and
config types (the engine itself only runs as a subprocess); the advisor and the report are
reached through `harness.postprocess` once the bundle is written.
"""
