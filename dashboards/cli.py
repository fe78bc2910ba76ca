"""`kvscope dashboards export|import`: put the generated dashboards where Grafana reads them.

    kvscope dashboards export DIR
    kvscope dashboards import --grafana-url URL [--folder NAME] [--overwrite] [--token-file PATH]

Import-light: argparse only at import time; the builders and grafana-client are imported by
the handlers, so `kvscope --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_FOLDER = "kvscope"


def _export(args: argparse.Namespace) -> int:
    from dashboards.generate import write_all

    for path in write_all(args.dir):
        print(path)
    return 0


def _import(args: argparse.Namespace) -> int:
    from dashboards.generate import build_all
    from dashboards.grafana_import import DashboardImportError, import_dashboards, resolve_target

    try:
        target = resolve_target(args.grafana_url, args.token_file)
        imported = import_dashboards(
            target, build_all(), folder=args.folder, overwrite=args.overwrite, timeout=args.timeout
        )
    except DashboardImportError as exc:
        # The message is redacted by grafana_import; nothing else here knows a secret.
        print(f"kvscope dashboards import: error: {exc}", file=sys.stderr)
        return 1
    where = (
        f"folder {args.folder!r}"
        if args.folder and args.folder.lower() != "general"
        else "the General folder"
    )
    for item in imported:
        print(f"imported {item.uid} (version {item.version}) into {where}: {item.url}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `dashboards` command group to the `kvscope` parser."""
    parser = subparsers.add_parser(
        "dashboards",
        help="export or import the Grafana dashboards",
        description="Grafana dashboards for kvscope, generated from code (see dashboards/README.md).",
    )
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)
    commands = parser.add_subparsers(dest="dashboards_command", metavar="COMMAND")

    export = commands.add_parser(
        "export",
        help="write the dashboard JSON files into a folder",
        description="Write kvscope-overview.json and vllm-native.json into DIR, e.g. the folder "
        "a Grafana file provider reads (dashboards/provisioning/dashboards/kvscope.yml).",
    )
    export.add_argument("dir", type=Path, metavar="DIR", help="output folder (created if missing)")
    export.set_defaults(func=_export)

    imp = commands.add_parser(
        "import",
        help="import the dashboards into a running Grafana over its HTTP API",
        description="Create the folder if needed and import both dashboards. Credentials: a "
        "service-account token in the GRAFANA_TOKEN environment variable or in "
        "--token-file, or user:password@ in the URL. Secrets are never printed.",
    )
    imp.add_argument(
        "--grafana-url",
        required=True,
        metavar="URL",
        help="Grafana base URL, e.g. http://127.0.0.1:3000 or https://host/grafana/",
    )
    imp.add_argument(
        "--folder",
        default=DEFAULT_FOLDER,
        metavar="NAME",
        help=f"folder title, created if missing (default: {DEFAULT_FOLDER}; 'General' for the root)",
    )
    imp.add_argument(
        "--overwrite",
        action="store_true",
        help="replace dashboards that already exist (same uid); without it they are left unchanged",
    )
    imp.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help="file holding the token (takes precedence over GRAFANA_TOKEN)",
    )
    imp.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="per-request timeout (default: 10)"
    )
    imp.set_defaults(func=_import)
