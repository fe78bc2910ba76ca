"""`kvscope sweep`: one `kvscope run` subprocess per load point against one server, then the
table, the throughput-latency curve, the knee and the highest load that meets the SLOs.
Its configuration is checked with `kvscope run`'s own functions; it never imports Locust.
May import `harness.run` (configuration checks, command lines, processes),
`harness.analysis`, `harness.report`, `harness.bundle`, `harness.formatting`, pandas.
"""
