"""Render the Helm chart offline with Helm's own template engine.

`helm-python-sdk` binds Helm's Go SDK (v4) through a bundled shared library, so rendering
needs neither a `helm` binary nor a network. `render` does what `helm template` does for
this chart: validate the values against values.schema.json, then render every template
(NOTES.txt left out: it is text for the person installing, not a manifest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CHART_DIR = Path(__file__).resolve().parent / "helm" / "kvscope"
RELEASE = "kvscope"
NAMESPACE = "kvscope"


def render(
    values: dict[str, Any] | None = None,
    chart_dir: Path = CHART_DIR,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Template file name (e.g. "servicemonitor.yaml") -> rendered text, in name order.

    Raises helm_python.HelmError (HelmValuesError when values break the schema,
    HelmRenderError when a template fails, e.g. on a `required` value).
    """
    import helm_python as helm  # dev dependency; imported here so the module loads without it

    with helm.Chart.load(str(chart_dir)) as chart:
        chart.validate_schema(values or {})
        out = chart.render(values or {}, name=release, namespace=namespace, is_install=True)
    rendered = {Path(path).name: text for path, text in out.items() if not path.endswith("NOTES.txt")}
    return dict(sorted(rendered.items()))


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a render, in template order."""
    return [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]


def find(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    """The one object of `kind` whose name ends with `name_suffix`; KeyError if not exactly one."""
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    if len(hits) != 1:
        raise KeyError(f"{len(hits)} {kind} objects named *{name_suffix}")
    return hits[0]
