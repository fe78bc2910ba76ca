"""The reference engine's OpenAI-compatible HTTP server (aiohttp), with vLLM-dialect /metrics.

Layout, one concept per module: `app` (routes, middlewares, lifecycle), `generate` (the two
generation endpoints), `generation` (one accepted request on its way out), `protocol`
(request validation), `responses` (OpenAI shapes), `streaming` (SSE), `engine_loop` (the
engine thread and its handover), `events` (the commands and events between the engine
thread and the event loop), `metrics` (vLLM V1 families), `timing` (the per-request
`kvscope` object), `errors`, `state`, `background` (run a server on a thread, for tests and
benchmarks), `serve_cli` (the command; its flags are `reference_engine.serve_options`). See
README.md.

May import: aiohttp, prometheus-client and the engine core; torch only through the engine
factory, when a real model is served. `serve_cli` stays stdlib-only at import.
"""
