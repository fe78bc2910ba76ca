"""kvscope's harness, in packages by the process each runs in: `cli` (the `kvscope` command
line, argparse only), `run` (`kvscope run` and `worker`: the orchestrating process), `sweep`,
`load` (what runs inside Locust, the API of `loadtests/`), `workload` (the Locust-free
pieces of a load test and its request record), `bundle` (the results bundle's schema,
writer and one reader), and `analysis`, `report`, `advisor` (what a finished bundle
becomes); at the root `results.load(path)` (the public way into a bundle), `postprocess`
(advice, then report) and `formatting` (numbers as reports and the console show them).
Packages import downwards only (cli, results, load > sweep > run > postprocess > report >
advisor, analysis > bundle > workload, formatting); the harness may import `exporter`, and
`reference_engine` only for its argument declarations, config types, catalogue and simulator.
"""
