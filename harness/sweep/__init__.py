"""`kvscope sweep`: one `kvscope run` per load point against one server, then the table,
the throughput-latency curve, the knee and the highest load that meets the SLOs.

Each point runs as a `kvscope run` subprocess, so this package never imports Locust. May
import: `harness.run` (its shared configuration checks, command lines, processes),
`harness.analysis`, `harness.report`, `harness.formatting`, pandas.
"""
