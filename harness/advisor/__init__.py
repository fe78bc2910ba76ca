"""The advisor: is the KV cache the bottleneck, and what should change? Sizing arithmetic
(`sizing`, `capacity`, `sizing_text`), the deployment a run measured (`deployment`, from
run.json's facts), the diagnosis of the server's samples (`diagnose`, the exporter's own
rules), workload evidence (`evidence`, `prefixes`), the verdict rules (`verdicts`),
what-if replays on the simulator (`whatif`), advice.json as types (`record`, every note
and reason a coded `harness.bundle.finding.Finding`), and live advice from a running
exporter (`live`); the report renders the advice (`harness.report.advice`). May import
`harness.bundle`, `harness.workload.fingerprint`, `harness.formatting`, `exporter`
(diagnosis rules, series, quantities), `reference_engine` for its catalogue, config types
and simulator (never its model or torch), pandas, numpy.
"""
