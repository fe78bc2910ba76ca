"""Analysis of a results bundle, plain functions over pandas frames, one concept per module:
`slo` (parse `ttft=1s,tpot=100ms`, test requests against SLOs), `latency` (client
percentiles, throughput, goodput, errors, achieved lengths), `server` (KV usage, hit ratio,
preemptions, running/waiting over time, counter-reset safe), `join` (latency by KV-usage
band, before/after preemption onset, client vs server timing), `selfcheck` (was the client
saturated?), `knee` (a sweep's knee and highest SLO-meeting load) and `summary` (the source
of summary.json). Bundles come from `harness.bundle.read`. May import pandas, numpy,
`harness.bundle`, `harness.formatting`, `exporter` (units, quantities); nothing that runs a
load test or an engine.
"""
