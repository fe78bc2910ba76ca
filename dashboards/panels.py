"""Grafana panel JSON as plain dicts: time series, stat and table panels.

Only the fields we set on purpose are emitted; Grafana fills in the rest when it loads a
dashboard, and a short JSON keeps `git diff` of the committed files readable. Every panel
and every query points at the `${datasource}` variable, never at a data-source uid: a
hard-coded uid (as in several published LLM dashboards) only works on the Grafana where the
dashboard was exported.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

DATASOURCE: JSON = {"type": "prometheus", "uid": "${datasource}"}

TOKENS_PER_S = "count:tok/s"
PER_S = "suffix:/s"


def query(expr: str, legend: str = "__auto", *, instant: bool = False, fmt: str = "") -> JSON:
    """One Prometheus query. Range queries unless `instant`; `fmt` is e.g. "table"."""
    q: JSON = {"datasource": DATASOURCE, "editorMode": "code", "expr": expr, "legendFormat": legend}
    if instant:
        q |= {"instant": True, "range": False}
    else:
        q["range"] = True
    if fmt:
        q["format"] = fmt
    return q


def thresholds(*steps: tuple[str, float | None]) -> JSON:
    """Absolute thresholds; the first step's value is None (the base colour)."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


NEUTRAL = thresholds(("blue", None))
# Grafana colours KV usage orange from 90 % and red from 98 %, as vLLM's own dashboards do:
# near 100 % is normal under load, but at 98 % new requests wait and running ones get preempted.
KV_USAGE = thresholds(("green", None), ("orange", 0.9), ("red", 0.98))
PREEMPTION_RATE = thresholds(("green", None), ("orange", 0.001), ("red", 1))
# Preemptions per finished request: < 1 % is "occasional", > 5 % means act (advisor rules).
PREEMPTION_SHARE = thresholds(("green", None), ("orange", 0.01), ("red", 0.05))


def value_mappings(texts: dict[str, tuple[str, str]]) -> list[JSON]:
    """Map raw values to display text and colour: {value: (text, colour)}."""
    options = {
        value: {"color": color, "index": i, "text": text}
        for i, (value, (text, color)) in enumerate(texts.items())
    }
    return [{"type": "value", "options": options}]


def _panel(kind: str, title: str, description: str, targets: list[JSON]) -> JSON:
    for i, target in enumerate(targets):
        target["refId"] = chr(ord("A") + i)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
    }


def _color_overrides(colors: dict[str, str]) -> list[JSON]:
    return [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "color", "value": {"fixedColor": color, "mode": "fixed"}}],
        }
        for name, color in colors.items()
    ]


def timeseries(
    title: str,
    description: str,
    targets: list[JSON],
    *,
    unit: str = "short",
    max_value: float | None = None,
    steps: JSON | None = None,
    colors: dict[str, str] | None = None,
) -> JSON:
    """A time series panel; with `steps` the thresholds are drawn as dashed lines."""
    custom: JSON = {"fillOpacity": 10, "lineWidth": 1, "showPoints": "never"}
    if steps is not None:
        custom["thresholdsStyle"] = {"mode": "dashed"}
    defaults: JSON = {"color": {"mode": "palette-classic"}, "custom": custom, "min": 0, "unit": unit}
    if max_value is not None:
        defaults["max"] = max_value
    if steps is not None:
        defaults["thresholds"] = steps
    panel = _panel("timeseries", title, description, targets)
    panel["fieldConfig"] = {"defaults": defaults, "overrides": _color_overrides(colors or {})}
    panel["options"] = {
        "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return panel


def stat(
    title: str,
    description: str,
    targets: list[JSON],
    *,
    unit: str = "short",
    steps: JSON = NEUTRAL,
    mappings: list[JSON] | None = None,
    max_value: float | None = None,
) -> JSON:
    """A stat tile with the latest value; thresholds colour the background when judged."""
    defaults: JSON = {
        "color": {"mode": "thresholds"},
        "thresholds": steps,
        "unit": unit,
        "mappings": mappings or [],
    }
    if max_value is not None:
        defaults["max"] = max_value
    panel = _panel("stat", title, description, targets)
    panel["fieldConfig"] = {"defaults": defaults, "overrides": []}
    panel["options"] = {
        "colorMode": "none" if steps is NEUTRAL else "background",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "textMode": "value_and_name",
    }
    return panel


def table(
    title: str,
    description: str,
    targets: list[JSON],
    *,
    hide: tuple[str, ...] = ("Time",),
    rename: dict[str, str] | None = None,
    transformations: list[JSON] | None = None,
    overrides: list[JSON] | None = None,
    no_value: str = "",
) -> JSON:
    """A table of instant-query results; label columns shown, `hide` columns dropped."""
    panel = _panel("table", title, description, targets)
    organize = {
        "id": "organize",
        "options": {"excludeByName": {name: True for name in hide}, "renameByName": rename or {}},
    }
    panel["transformations"] = [*(transformations or []), organize]
    defaults: JSON = {"custom": {"align": "auto", "cellOptions": {"type": "auto"}}}
    if no_value:
        defaults["noValue"] = no_value
    panel["fieldConfig"] = {"defaults": defaults, "overrides": overrides or []}
    panel["options"] = {"cellHeight": "sm", "footer": {"show": False}, "showHeader": True}
    return panel


def field_mappings(field: str, texts: dict[str, tuple[str, str]]) -> JSON:
    """An override that maps one table column's values to text and colour."""
    return {
        "matcher": {"id": "byName", "options": field},
        "properties": [
            {"id": "mappings", "value": value_mappings(texts)},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
        ],
    }


def latency(title: str, description: str, quantile_exprs: dict[str, str], legend: str) -> JSON:
    """Quantile lines of one histogram; legends read e.g. `p95 · <legend>`."""
    targets = [query(expr, f"{name} · {legend}") for name, expr in quantile_exprs.items()]
    return timeseries(title, description, targets, unit="s")
