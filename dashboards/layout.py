"""Dashboard assembly: grid placement, template variables and the dashboard envelope.

A `Layout` is created per dashboard build (no module-level state), places panels left to
right on Grafana's 24-column grid and numbers them, so panel ids and positions are
deterministic and the committed JSON only changes when a panel changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboards.panels import DATASOURCE, JSON, latency
from dashboards.promql import Promql

GRID_WIDTH = 24
SCHEMA_VERSION = 39  # Grafana 10.4 / 11.x dashboards; newer Grafanas migrate it on load.


@dataclass(slots=True)
class Layout:
    """Places panels on the grid in reading order; rows start a new line."""

    panels: list[JSON] = field(default_factory=list)
    _next_id: int = 1
    _x: int = 0
    _y: int = 0
    _line_height: int = 0

    def _newline(self) -> None:
        self._y += self._line_height
        self._x, self._line_height = 0, 0

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": self._y},
                "id": self._take_id(),
            }
        )
        self._y += 1

    def add(self, panel: JSON, w: int, h: int = 8) -> None:
        if self._x + w > GRID_WIDTH:
            self._newline()
        panel["gridPos"] = {"h": h, "w": w, "x": self._x, "y": self._y}
        panel["id"] = self._take_id()
        self.panels.append(panel)
        self._x += w
        self._line_height = max(self._line_height, h)


def add_quantile_panels(
    layout: Layout, q: Promql, histograms: tuple[tuple[str, str, str], ...], w: int
) -> None:
    """One p50/p95/p99 panel per (title, histogram, what it measures). Quantiles aggregate the
    instances of one target and model: a user sees the service, not the replica their request
    landed on."""
    per_model = Promql(q.selector, by="target, model")
    for title, histogram, what in histograms:
        layout.add(
            latency(
                title,
                f"{what}\n\nMetric: `{histogram}`",
                per_model.latency_quantiles(histogram),
                "{{target}} {{model}}",
            ),
            w=w,
        )


def datasource_variable() -> JSON:
    """`$datasource`: picks any Prometheus data source, so no uid is baked into the JSON.

    File provisioning does not resolve `__inputs`/`${DS_PROMETHEUS}` placeholders (only the
    UI import does); a variable of type datasource works with every import path.
    """
    return {
        "current": {},
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "type": "datasource",
    }


def label_variable(name: str, label: str, metric: str, selector: str = "") -> JSON:
    """A multi-value `label_values(...)` variable whose "All" is the regex `.*`.

    `allValue: ".*"` (rather than Grafana's default of OR-ing every listed value) keeps
    series that lack the label, e.g. vLLM builds without the `engine` label, and keeps
    queries short when a fleet has hundreds of instances.
    """
    source = f"{metric}{{{selector}}}" if selector else metric
    expr = f"label_values({source}, {label})"
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": expr,
        "hide": 0,
        "includeAll": True,
        "label": name.capitalize().replace("_", " "),
        "multi": True,
        "name": name,
        "options": [],
        "query": expr,
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }


def dashboard(
    *, uid: str, title: str, description: str, tags: list[str], layout: Layout, variables: list[JSON]
) -> JSON:
    """The dashboard model itself (no `{"dashboard": ...}` wrapper): what file provisioning
    reads and what `POST /api/dashboards/db` takes under its `dashboard` key. `id` is None
    so the same JSON creates or updates; the stable `uid` is what matches it on update."""
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": False,
                "icon": "external link",
                "includeVars": False,
                "keepTime": True,
                "tags": ["kvscope"],
                "targetBlank": False,
                "title": "kvscope dashboards",
                "type": "dashboards",
            }
        ],
        "panels": layout.panels,
        "refresh": "10s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": tags,
        "templating": {"list": variables},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
    }
