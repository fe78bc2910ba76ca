"""The OTLP trace receiver of `kvscope run`: per-request server spans (vLLM's `llm_request`,
SGLang's request root, TGI's handler span) received over OTLP/HTTP, mapped to kvscope's
server timings and written as JSON lines for the bundle to join by trace id.

Runs in a process of its own (`python -m harness.otlp.serve`, started by `harness.run.otlp`),
so a hostile or huge body costs that process, never the run. Imports the standard library,
`opentelemetry-proto` (decoding) and `exporter.inflate` (capped decompression); no pandas,
numpy or Locust. `docs/spans.md` is the user's guide.
"""
