"""`kvscope run` and `kvscope worker`, in the orchestrating process (never inside Locust,
which it starts as subprocesses): one typed `RunConfig` checked before anything starts (its
checks shared with `kvscope sweep`), the child processes and their command lines, the live
progress line, the end of a run (bundle, summary, console, then advice and report) and the
deployment facts it records. May import `harness.workload`, `harness.bundle`,
`harness.analysis`, `harness.formatting`, `harness.postprocess` (late, at the end),
`exporter`, and `reference_engine` for its argument declarations and config types only.
"""
