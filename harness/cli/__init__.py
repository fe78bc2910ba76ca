"""The `kvscope` command line: one parser module per subcommand, argparse only. Every module
here is import-light — argparse, the option declarations (`harness.workload.options`,
`harness.run.engine_flags`) and `exporter.units` — so `kvscope --help` imports no Locust,
pandas or torch; each handler imports the package that does the work (`harness.run`,
`harness.sweep`, `harness.advisor`, `harness.report`, ...) when it runs. Nothing imports
`harness.cli` but the entry points (`kvscope`, `python -m harness.cli`).
"""

from harness.cli.kvscope import build_parser, main

__all__ = ["build_parser", "main"]
