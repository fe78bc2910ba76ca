"""Offline validation of Kubernetes objects: core kinds against the schemas that
`kubernetes-validate` bundles, Prometheus Operator kinds against the CRD schemas vendored in
deploy/schemas. Both strict: a field the schema does not declare is an error (the API server
would drop it silently, which is how a misspelt `honorLabels` goes unnoticed).
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import jsonschema
import kubernetes_validate

from tests.support.paths import ROOT

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest bundled.
KUBERNETES_VERSIONS = ("1.25.0", "1.37.0")
OPERATOR_SCHEMAS = ROOT / "deploy" / "schemas" / "prometheus-operator-v0.93.0"
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with undeclared properties forbidden wherever it lists properties (and does
    not allow unknown fields on purpose)."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@functools.cache
def operator_validator(kind: str) -> jsonschema.Draft7Validator:
    schema = json.loads((OPERATOR_SCHEMAS / f"{kind.lower()}.json").read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(_strict(schema))


def problems(doc: dict[str, Any]) -> list[str]:
    """Every schema violation of one object; empty when it is valid."""
    where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
    if doc.get("kind") in OPERATOR_KINDS:
        if doc.get("apiVersion") != "monitoring.coreos.com/v1":
            return [f"{where}: apiVersion {doc.get('apiVersion')!r}, want monitoring.coreos.com/v1"]
        return [
            f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in operator_validator(doc["kind"]).iter_errors(doc)
        ]
    found = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            found.append(f"{where} (Kubernetes {version}): {'/'.join(map(str, exc.path))}: {exc.message}")
    return found


def all_problems(docs: list[dict[str, Any]]) -> list[str]:
    return [p for doc in docs for p in problems(doc)]
