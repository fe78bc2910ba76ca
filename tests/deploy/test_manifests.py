"""deploy/kubernetes/: generated from the chart and the dashboards code without drift, valid
against the Kubernetes and Prometheus Operator schemas offline, and safe by default (ClusterIP
only, non-root read-only containers with probes and resources)."""

from __future__ import annotations

import copy
import json

import yaml

from dashboards import generate as dashboards_generate
from deploy import chart, generate
from tests.deploy.conftest import load_manifest
from tests.deploy.validation import all_problems

KVSCOPE_CONTAINERS = {"kvscope-exporter", "locust-master", "locust-worker"}


def pod_specs(docs):
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def test_generated_files_are_up_to_date():
    assert generate.stale_files() == [], "run: python -m deploy.generate"


def test_stale_check_notices_a_hand_edit(tmp_path, monkeypatch):
    """The drift check compares content: a manifest edited by hand is reported."""
    copy_dir = tmp_path / "kubernetes"
    copy_dir.mkdir()
    for path in generate.MANIFESTS_DIR.iterdir():
        (copy_dir / path.name).write_text(path.read_text())
    edited = copy_dir / "servicemonitor.yaml"
    edited.write_text(edited.read_text().replace("interval: 15s", "interval: 30s", 1))
    monkeypatch.setattr(generate, "MANIFESTS_DIR", copy_dir)
    monkeypatch.setattr(generate, "MANIFEST_VALUES", copy_dir / "values.yaml")
    assert generate.stale_files() == [edited]


def test_every_manifest_is_valid_offline(manifest_files, manifest_docs):
    assert set(manifest_files) >= {
        "exporter-service.yaml",
        "servicemonitor.yaml",
        "podmonitor.yaml",
        "prometheusrule.yaml",
        "dashboards.yaml",
        "vllm-example.yaml",
        "loadtest.yaml",
    }
    kinds = sorted(doc["kind"] for doc in manifest_docs)
    assert kinds == sorted(
        [
            "ConfigMap",
            "ConfigMap",
            "Service",
            "Deployment",
            "Service",
            "Job",
            "PodMonitor",
            "PrometheusRule",
            "ServiceMonitor",
            "Deployment",
            "Service",
        ]
    )
    assert all_problems(manifest_docs) == []


def test_validation_rejects_misspelt_and_mistyped_fields(manifest_docs):
    """The validators are strict, for core kinds and CRDs alike, so a green run means something."""
    monitor = copy.deepcopy(chart.find(manifest_docs, "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["honorLabel"] = True
    rule = copy.deepcopy(chart.find(manifest_docs, "PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["for"] = 5
    service = copy.deepcopy(chart.find(manifest_docs, "Service", "-exporter"))
    service["spec"]["ports"][0]["port"] = "9400x"
    deployment = copy.deepcopy(chart.find(manifest_docs, "Deployment", "-vllm"))
    deployment["spec"]["template"]["spec"]["containers"][1]["readOnlyRootFilesystem"] = True
    found = all_problems([monitor, rule, service, deployment])
    assert any("honorLabel" in p for p in found)
    assert any("PrometheusRule" in p and "rules/0/for" in p and "not of type 'string'" in p for p in found)
    assert any("Service/kvscope-exporter" in p and "port" in p for p in found)
    assert any("readOnlyRootFilesystem" in p for p in found)


def test_rules_and_dashboards_are_the_repository_ones_unchanged(manifest_docs):
    rule = chart.find(manifest_docs, "PrometheusRule")
    alerts = yaml.safe_load((generate.ALERTS).read_text())
    assert rule["spec"] == alerts
    maps = [d for d in manifest_docs if d["kind"] == "ConfigMap"]
    built = dashboards_generate.build_all()
    assert {key for m in maps for key in m["data"]} == {f"{name}.json" for name in built}
    for m in maps:
        ((key, text),) = m["data"].items()
        assert json.loads(text) == built[key.removesuffix(".json")]
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert m["metadata"]["annotations"] == {"grafana_folder": "kvscope"}


def test_no_helm_only_labels_in_plain_manifests(manifest_docs):
    for doc in manifest_docs:
        labels = doc["metadata"].get("labels", {})
        assert "helm.sh/chart" not in labels and "app.kubernetes.io/managed-by" not in labels, doc["kind"]


def test_exposure_is_cluster_internal(manifest_docs):
    assert not [d for d in manifest_docs if d["kind"] in ("Ingress", "Route", "Gateway", "HTTPRoute")]
    for svc in (d for d in manifest_docs if d["kind"] == "Service"):
        assert svc["spec"]["type"] == "ClusterIP", svc["metadata"]["name"]
        assert "externalIPs" not in svc["spec"]
    for name, spec in pod_specs(manifest_docs):
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), name
        for container in spec["containers"]:
            assert all("hostPort" not in port for port in container.get("ports", [])), name


def test_kvscope_containers_are_non_root_read_only_with_probes_and_resources(manifest_docs):
    seen = set()
    for name, spec in pod_specs(manifest_docs):
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            if container["name"] not in KVSCOPE_CONTAINERS:
                continue
            seen.add(container["name"])
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] and sc["runAsUser"] != 0, name
            assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"], name
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert "emptyDir" in volumes[mounts["/tmp"]], f"{name}: /tmp must be an emptyDir"
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
            if container["name"] != "locust-worker":  # a worker has no port to probe
                assert "readinessProbe" in container, name
    assert seen == KVSCOPE_CONTAINERS


def test_sidecar_scrapes_its_own_pod_and_labels_series_by_pod(manifest_docs):
    pod = chart.find(manifest_docs, "Deployment", "-vllm")["spec"]["template"]
    (sidecar,) = [c for c in pod["spec"]["containers"] if c["name"] == "kvscope-exporter"]
    assert "--target=$(POD_NAME)=http://127.0.0.1:8000/metrics" in sidecar["args"]
    assert "--listen=0.0.0.0:9400" in sidecar["args"]
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "kvscope"}
    service = chart.find(manifest_docs, "Service", "-exporter")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_monitors_keep_engine_instance_labels_and_the_alerts_job(manifest_docs):
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        exporter_endpoint = chart.find(manifest_docs, kind)["spec"][key][0]
        assert exporter_endpoint["port"] == "kvscope" and exporter_endpoint["honorLabels"] is True
        assert {"action": "replace", "targetLabel": "job", "replacement": "kvscope-exporter"} in (
            exporter_endpoint["relabelings"]
        )
    alerts = generate.ALERTS.read_text()
    assert 'up{job="kvscope-exporter"}' in alerts  # the job the relabeling above sets


def apply_strategic_patch(deployment, patch):
    """Kubernetes' strategic merge for the fields the sidecar patch touches: pod labels merge
    by key, containers and volumes by name."""
    out = copy.deepcopy(deployment)
    pod, patch_pod = out["spec"]["template"], patch["spec"]["template"]
    pod["metadata"]["labels"].update(patch_pod["metadata"]["labels"])
    for field in ("containers", "volumes"):
        by_name = {item["name"]: item for item in pod["spec"].get(field, [])}
        by_name.update({item["name"]: item for item in patch_pod["spec"][field]})
        pod["spec"][field] = list(by_name.values())
    return out


def test_sidecar_patch_turns_a_plain_server_into_the_example(manifest_docs):
    example = chart.find(manifest_docs, "Deployment", "-vllm")
    plain = copy.deepcopy(example)
    pod = plain["spec"]["template"]
    pod["spec"]["containers"] = [c for c in pod["spec"]["containers"] if c["name"] != "kvscope-exporter"]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "kvscope-tmp"]
    del pod["metadata"]["labels"]["kvscope/exporter"]
    patch = load_manifest(generate.MANIFESTS_DIR / generate.SIDECAR_PATCH)[0]
    patched = apply_strategic_patch(plain, patch)
    assert patched == example
    assert all_problems([patched]) == []


def test_load_test_pair_points_workers_at_the_headless_master(manifest_docs):
    master = chart.find(manifest_docs, "Deployment", "-locust-master")
    service = chart.find(manifest_docs, "Service", "-locust-master")
    workers = chart.find(manifest_docs, "Job", "-locust-workers")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    (m,) = master["spec"]["template"]["spec"]["containers"]
    assert {"--master-bind=0.0.0.0:5557", "--workers=0", "--remote-workers=2"} <= set(m["args"])
    assert "--target=http://kvscope-vllm:8000" in m["args"]  # the example's Service
    (w,) = workers["spec"]["template"]["spec"]["containers"]
    assert w["args"][:2] == ["worker", f"--master={service['metadata']['name']}:5557"]
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == 2
    assert workers["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
