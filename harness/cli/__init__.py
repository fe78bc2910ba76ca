"""The `kvscope` command line: one parser module per subcommand, argparse only.

Every module here is import-light (argparse, the option specs in `harness.workload.options`
and `harness.run.engine_flags`, the grammar of `exporter.units`): `kvscope --help` must not
import Locust, pandas or torch. Handlers import the package that does the work (`harness.run`,
`harness.sweep`, `harness.advisor`, `harness.report`, ...) when they run. Nothing imports
`harness.cli` except the entry point (`kvscope`, `python -m harness.cli`).
"""

from harness.cli.kvscope import build_parser, main

__all__ = ["build_parser", "main"]
