"""`kvscope probe`: the KV footprint a request really takes in a server's own pool, and the
concurrency that pool then holds.

A live probe sends lone requests (unique token-id prompts, so the prefix cache gives
nothing; `ignore_eos`, so the output length is exact) at a ladder of prompt and output
lengths, reads the pool's occupancy while each is alive (`/metrics` through the exporter's
dialects, llama.cpp's `/slots`), and fits blocks per request = fixed + tokens / tokens per
block. From a bundle it uses the run's request lengths and KV samples instead, without
sending anything. Both end in one `ProbeResult` (probe.json, probe.md, the console table).

What cannot be measured is said, each time with a stable snake_case `code`
(`findings.Finding`), and never replaced by a made-up figure.

Layering: below the advisor (whose verdicts state their effect in measured terms through
`statement`) and above the bundle; it imports the exporter's parser and dialects, never
Locust, the run orchestration or the engine.
"""
