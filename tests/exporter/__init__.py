"""Tests of the exporter. They must run in the slim sidecar environment (aiohttp and
prometheus-client, plus pytest, hypothesis and pyyaml for the tests themselves): they may
import the exporter and the tests.support modules `paths`, `prometheus`, `static_metrics`,
`synthetic_metrics`, `llama_server` and `wait`, never torch, pandas, locust, numpy or another
kvscope package."""
