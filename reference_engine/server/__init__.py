"""The reference engine's OpenAI-compatible HTTP server (aiohttp), with vLLM-dialect /metrics.

The API server process of vLLM V1's split: HTTP, tokenization, detokenization, streaming and
metrics; the engine core (`reference_engine.core`) runs elsewhere, in its own process by
default.

Layout, one concept per module: `app` (routes, middlewares, lifecycle), `generate` (the two
generation endpoints), `generation` (one accepted request on its way out), `protocol`
(request validation), `responses` (OpenAI shapes), `streaming` (SSE), `async_engine` (the
server's engine: admission, core client, outputs), `output_processor` (detokenizing and
routing core outputs), `events` (what a request's handler receives), `metrics` (vLLM V1
families), `timing` (the per-request `kvscope` object), `errors`, `state`, `background` (run
a server on a thread, for tests and benchmarks), `serve_cli` (the command; its flags are
`reference_engine.serve_options`). See README.md.

May import: aiohttp, prometheus-client and the engine core's client side; torch only when
`--engine-core thread` builds the model in this process. `serve_cli` stays stdlib-only at
import.
"""
