"""kvscope's exporter: the sidecar that scrapes LLM servers' /metrics, recognises each
engine's metric dialect, and re-exports canonical `kvscope_*` metrics with live advice.

May import: the standard library, aiohttp and prometheus-client, and its own modules; never
another kvscope package (the harness imports the exporter, not the reverse), nor torch,
locust, pandas or numpy, so it runs in a slim container next to a server. The command-line
modules (`cli`, `units`, `defaults`, `quantities`, `credentials`, `redirects`) are stdlib
only, and so is everything a parser process imports (`parser_process`, `analysis`, `parse`,
`dialects`).
"""
