"""Generate the committed dashboard JSON from code, or check that it is up to date.

    python -m dashboards.generate            # rewrite dashboards/json/*.json
    python -m dashboards.generate --check    # exit 1 if a committed file is stale

The JSON files are generated artefacts that are committed anyway, because Grafana file
provisioning and UI import need files; the test suite fails when they drift from the code,
so edits go into the builders, never into the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from dashboards import kvscope_overview, lint, vllm_native
from dashboards.panels import JSON

JSON_DIR = Path(__file__).resolve().parent / "json"

# File stem -> builder. Order is the order of export and import.
BUILDERS: dict[str, Callable[[], JSON]] = {
    "kvscope-overview": kvscope_overview.build,
    "vllm-native": vllm_native.build,
}


def build_all() -> dict[str, JSON]:
    """Every dashboard model, freshly built, keyed by file stem."""
    return {name: build() for name, build in BUILDERS.items()}


def render(dashboard: JSON) -> str:
    """Canonical text of a dashboard: sorted keys, 2-space indent, trailing newline, so the
    committed files diff cleanly and byte-compare reliably."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_all(out_dir: Path) -> list[Path]:
    """Write `<stem>.json` for every dashboard into `out_dir` (created if missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in build_all().items():
        path = out_dir / f"{name}.json"
        path.write_text(render(model), encoding="utf-8")
        written.append(path)
    return written


def stale_files(json_dir: Path = JSON_DIR) -> list[str]:
    """Names of committed files that are missing or differ from the generated text."""
    stale = []
    for name, model in build_all().items():
        path = json_dir / f"{name}.json"
        if not path.is_file() or path.read_text(encoding="utf-8") != render(model):
            stale.append(path.name)
    return stale


def _panels(panels: list[JSON]) -> Iterator[JSON]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # panels nested in collapsed rows


def all_panel_queries(dashboard: JSON) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) for every query of every panel, in layout order.

    Template-variable queries (`label_values(...)`) are not panel queries and are excluded.
    """
    return [
        (panel.get("title", ""), target["expr"])
        for panel in _panels(dashboard.get("panels", []))
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def problems(dashboards: dict[str, JSON]) -> list[str]:
    """Lint findings over every dashboard: unrated counters, quantiles without
    `sum by (le)`, fixed datasource uids. Generation refuses to write when there are any."""
    found = []
    for name, model in dashboards.items():
        found += [f"{name}: {p}" for p in lint.datasource_problems(model)]
        for title, expr in all_panel_queries(model):
            found += [
                f"{name} / {title}: {p}" for p in lint.counter_problems(expr) + lint.quantile_problems(expr)
            ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if committed JSON is stale")
    parser.add_argument("--out", type=Path, default=JSON_DIR, help="output folder (default: dashboards/json)")
    args = parser.parse_args(argv)
    found = problems(build_all())
    for problem in found:
        print(f"lint: {problem}", file=sys.stderr)
    if found:
        return 1
    if args.check:
        stale = stale_files(args.out)
        for name in stale:
            print(f"stale: {args.out / name} (run: python -m dashboards.generate)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_all(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
