"""Lint rules for generated dashboards and alert rules, from mistakes in published ones.

Each rule returns a list of human-readable problems (empty when clean), so the test suite
can show every problem at once. The rules are textual on purpose: they run without a
PromQL parser, and the expressions they check are generated in a small number of shapes.

- counters (and histogram `_bucket`/`_sum`/`_count` series) must be read through `rate()`
  or `increase()` with a range; a ratio of raw counters is a lifetime average;
- `histogram_quantile` must aggregate with `sum by (le, ...)`, or it computes one quantile
  per series instead of one for the selection;
- datasources must be the `${datasource}` variable, never a fixed uid;
- metric names must be ones the source actually exports (catches a missing `_total`, as in
  `vllm:num_preemptions`, which returns nothing and silently shows "No data").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

COUNTER_LIKE = re.compile(
    r"(?<![\w:])([A-Za-z_:][\w:]*_(?:total|bucket|sum|count))(?![\w:])(\{[^}]*\})?(\[[^\]]+\])?"
)
QUANTILE = re.compile(r"histogram_quantile\(\s*([^,]+),\s*(.{0,40})")
IDENTIFIER = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
ALLOWED_DATASOURCE_UIDS = {"${datasource}", "-- Grafana --"}


def counter_problems(expr: str) -> list[str]:
    """Counter-like series used outside `rate(...[w])` / `increase(...[w])`."""
    problems = []
    for match in COUNTER_LIKE.finditer(expr):
        name, _selector, window = match.groups()
        before = expr[: match.start()].rstrip()
        if not (before.endswith(("rate(", "increase(")) and window):
            problems.append(f"{name} is read without rate()/increase() over a range: {expr}")
    return problems


def quantile_problems(expr: str) -> list[str]:
    """`histogram_quantile` calls whose second argument is not `sum by (le, ...)`."""
    return [
        f"histogram_quantile without sum by (le, ...): {expr}"
        for _q, rest in QUANTILE.findall(expr)
        if not re.match(r"sum\s+by\s*\(\s*le\b", rest)
    ]


def metric_names(expr: str) -> set[str]:
    """Names of the metrics an expression selects: identifiers left once string literals,
    label matchers, grouping clauses and ranges are removed, and that are not calls."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    return {name for name in IDENTIFIER.findall(text) if name.lower() not in KEYWORDS}


def unknown_metrics(expr: str, known: Iterable[str]) -> list[str]:
    """Selected metrics that are not in `known` (histogram suffixes are stripped first)."""
    known = set(known)
    problems = []
    for name in sorted(metric_names(expr)):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in known and base not in known:
            problems.append(f"unknown metric {name}: {expr}")
    return problems


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}", value
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def datasource_problems(dashboard: dict) -> list[str]:
    """Every `datasource` in the model must be the `${datasource}` variable (or Grafana's
    built-in annotation source); strings and fixed uids are reported with their path."""
    problems = []
    for path, value in _walk(dashboard):
        if not path.endswith(".datasource"):
            continue
        if isinstance(value, dict):
            if value.get("uid") not in ALLOWED_DATASOURCE_UIDS:
                problems.append(f"{path}: fixed datasource uid {value.get('uid')!r}")
        else:
            problems.append(
                f"{path}: datasource must be a {{type, uid: ${{datasource}}}} reference, got {value!r}"
            )
    return problems
