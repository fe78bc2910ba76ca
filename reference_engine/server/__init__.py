"""The reference engine's OpenAI-compatible HTTP server (aiohttp), with vLLM-dialect /metrics.

Layout, one concept per module: `app` (routes, middlewares, lifecycle), `generate` (the two
generation endpoints), `protocol` (request validation), `responses` (OpenAI shapes),
`streaming` (SSE), `engine_loop` (the engine thread and its handover), `events` (the
messages between the engine thread and the event loop), `metrics` (vLLM V1 families),
`timing` (the per-request `kvscope` object), `errors`, `state`, `background` (run a server on
a thread, for tests and benchmarks), `serve_cli` (the command). See README.md.
"""
