"""kvscope's Locust workloads: each `loadtests/NAME.py` runs under `locust -f` as well as
`kvscope run --workload NAME`, and imports only `harness.load` (its user classes, shapes and
the Locust-free helpers it re-exports)."""
