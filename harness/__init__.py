"""kvscope's harness: the `kvscope` command line, load-test orchestration, the Locust user,
the results bundle, analysis, reports and the advisor, in packages by the process each runs in.

- `cli`: argparse only (import-light); `run`: `kvscope run` and `worker` (the orchestrating
  process); `sweep`: `kvscope sweep`; `load`: what runs inside Locust (the API of
  `loadtests/`); `workload`: the Locust-free pieces of a load test and its request record;
  `bundle`: the results bundle's schema, writer and one reader; `analysis`, `report`,
  `advisor`: what a finished bundle becomes.
- Root modules: `results` (`load(path)`, the public way into a bundle), `postprocess`
  (advice, then report), `formatting` (numbers as reports and the console show them).

Dependencies point down: cli -> sweep -> run -> postprocess -> report -> advisor, analysis
-> bundle -> workload; `load` -> workload only. May import `exporter`, and `reference_engine`
only for its argument declarations, config types, catalogue and simulator.
"""
