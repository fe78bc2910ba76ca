"""deploy/helm/kvscope rendered by Helm's own engine (helm-python-sdk, offline): valid with the
default values and with non-default ones, values visibly used, bad values refused with a
message that names the value."""

from __future__ import annotations

import copy

import helm_python as helm
import pytest
import yaml

from deploy import chart
from tests.deploy.validation import all_problems

DIGEST = "sha256:" + "ab" * 32
CPU_DEMO = chart.CHART_DIR / "examples" / "cpu-demo.yaml"

NON_DEFAULT = {
    "fullnameOverride": "obs",
    "images": {"exporter": {"repository": "registry.example.com/kvscope-exporter", "digest": DIGEST}},
    # Helm merges maps with the defaults; null removes the default key.
    "sidecarSelector": {"app": "my-vllm", "kvscope/exporter": None},
    "exporter": {
        "interval": "500ms",
        "window": "2m",
        "extraArgs": ["--dialect", "vllm"],
        "standalone": {
            "enabled": True,
            "targets": [
                {"name": "sglang-0", "url": "http://sglang-0.sglang:30000/metrics"},
                {"name": "tgi", "url": "http://tgi.llm:80/metrics"},
            ],
        },
    },
    "engineMetrics": {"enabled": False},
    "serviceMonitor": {"interval": "30s", "labels": {"release": "kube-prometheus-stack"}},
    "podMonitor": {"enabled": True, "interval": "30s"},
    "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
    "dashboards": {
        "folder": "LLM serving",
        "folderAnnotation": "k8s-sidecar-target-directory",
        "labelValue": "kvscope",
        "namespace": "monitoring",
    },
    "loadtest": {
        "enabled": True,
        "target": "http://my-vllm.llm:8000",
        "workload": "shared_prefix",
        "workers": 3,
        "processesPerWorker": 2,
        "extraArgs": ["--spawn-rate", "4"],
    },
}


def kinds(docs):
    return sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)


def test_defaults_render_the_monitoring_objects_only(default_render):
    docs = chart.documents(default_render)
    assert kinds(docs) == [
        "ConfigMap/kvscope-dashboard-kvscope-overview",
        "ConfigMap/kvscope-dashboard-vllm-native",
        "PrometheusRule/kvscope",
        "Service/kvscope-exporter",
        "ServiceMonitor/kvscope",
    ]
    assert all_problems(docs) == []


def test_non_default_values_render_valid_objects_that_use_them():
    docs = chart.documents(chart.render(NON_DEFAULT))
    assert all_problems(docs) == []
    assert kinds(docs) == [
        "ConfigMap/obs-dashboard-kvscope-overview",
        "ConfigMap/obs-dashboard-vllm-native",
        "Deployment/obs-exporter-standalone",
        "Deployment/obs-locust-master",
        "Job/obs-locust-workers",
        "PodMonitor/obs",
        "PrometheusRule/obs",
        "Service/obs-exporter",
        "Service/obs-exporter-standalone",
        "Service/obs-locust-master",
        "ServiceMonitor/obs",
    ]
    standalone = chart.find(docs, "Deployment", "-exporter-standalone")
    (exporter,) = standalone["spec"]["template"]["spec"]["containers"]
    assert exporter["image"] == f"registry.example.com/kvscope-exporter@{DIGEST}"
    assert exporter["args"] == [
        "--listen=0.0.0.0:9400",
        "--interval=500ms",
        "--window=2m",
        "--target=sglang-0=http://sglang-0.sglang:30000/metrics",
        "--target=tgi=http://tgi.llm:80/metrics",
        "--dialect",
        "vllm",
    ]
    service = chart.find(docs, "Service", "-exporter")
    assert service["spec"]["selector"] == {"app": "my-vllm"}
    assert [p["name"] for p in service["spec"]["ports"]] == ["kvscope"]  # engineMetrics off
    monitor = chart.find(docs, "ServiceMonitor")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["kvscope"]
    assert monitor["spec"]["endpoints"][0]["interval"] == "30s"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert chart.find(docs, "PodMonitor")["spec"]["selector"]["matchLabels"] == {"app": "my-vllm"}
    assert chart.find(docs, "PrometheusRule")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "kvscope"
        assert cm["metadata"]["annotations"] == {"k8s-sidecar-target-directory": "LLM serving"}
    (master,) = chart.find(docs, "Deployment", "-locust-master")["spec"]["template"]["spec"]["containers"]
    assert {"--target=http://my-vllm.llm:8000", "--workload=shared_prefix", "--remote-workers=6"} <= set(
        master["args"]
    )
    assert master["args"][-2:] == ["--spawn-rate", "4"]
    workers = chart.find(docs, "Job", "-locust-workers")
    assert workers["spec"]["parallelism"] == 3
    (worker,) = workers["spec"]["template"]["spec"]["containers"]
    assert worker["args"] == ["worker", "--master=obs-locust-master:5557", "--processes=2"]


def test_cpu_demo_values_run_the_bundled_engine_with_the_sidecar():
    values = yaml.safe_load(CPU_DEMO.read_text())
    docs = chart.documents(chart.render(values))
    assert all_problems(docs) == []
    pod = chart.find(docs, "Deployment", "-engine")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["engine", "kvscope-exporter"]
    assert pod["containers"][0]["command"] == ["kvscope", "engine", "serve"]
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    (master,) = chart.find(docs, "Deployment", "-locust-master")["spec"]["template"]["spec"]["containers"]
    assert "--target=http://kvscope-engine:8000" in master["args"]


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ({"bogus": 1}, helm.HelmValuesError, "additional properties 'bogus' not allowed"),
        ({"serviceMonitor": {"interval": "15"}}, helm.HelmValuesError, "/serviceMonitor/interval"),
        ({"images": {"exporter": {"digest": "sha256:12"}}}, helm.HelmValuesError, "/images/exporter/digest"),
        ({"loadtest": {"enabled": True}}, helm.HelmRenderError, "loadtest.enabled needs loadtest.target"),
        (
            {"exporter": {"standalone": {"enabled": True}}},
            helm.HelmRenderError,
            "needs at least one entry in exporter.standalone.targets",
        ),
        (
            {"exporter": {"standalone": {"enabled": True, "targets": [{"name": "a", "url": "gpu-a:8000"}]}}},
            helm.HelmValuesError,
            "/exporter/standalone/targets/0/url",
        ),
    ],
)
def test_bad_values_are_refused_with_the_value_named(values, error, message):
    with pytest.raises(error, match=message):
        chart.render(values)


def test_values_file_defaults_match_the_schema_and_lint_is_clean():
    defaults = yaml.safe_load((chart.CHART_DIR / "values.yaml").read_text())
    assert chart.render(copy.deepcopy(defaults)) == chart.render()
    report = helm.lint(str(chart.CHART_DIR))
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # 2 warning, 3 error
