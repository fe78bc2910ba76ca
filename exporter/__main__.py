"""`python -m exporter ...`: the sidecar without the rest of kvscope's CLI.

Same options as `kvscope exporter` (including the `inspect` sub-command); handy in a slim
container next to a server, where only aiohttp and prometheus-client are installed.
"""

from __future__ import annotations

import argparse
import sys

from exporter.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m")  # sub-command prog: "python -m exporter"
    register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(["exporter", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
