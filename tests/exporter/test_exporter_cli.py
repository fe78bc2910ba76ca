"""`kvscope exporter` and `kvscope exporter inspect` from the command line, and the import rule.

The commands run through `python -m exporter` (`exporter.__main__`), the same parser that
`kvscope exporter` registers, so these tests need nothing outside the exporter: they run in
the slim sidecar environment (aiohttp and prometheus-client, no harness, torch or numpy).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.__main__ import main
from tests.support.paths import ROOT

DATA = Path(__file__).parent / "data" / "metrics"
TRITON = DATA / "trtllm-triton_0.14plus_ifb_nv_trt_llm_readme.prom"
KEYS = {
    "labels",
    "kv_usage_ratio",
    "kv_capacity_blocks",
    "kv_block_size_tokens",
    "kv_capacity_tokens",
    "prefix_cache_queries_tokens",
    "prefix_cache_hits_tokens",
    "preemptions",
    "requests_running",
    "requests_waiting",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
}


def test_inspect_file_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(TRITON), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dialect"] == "trtllm" and isinstance(doc["notes"], list)
    (inst,) = doc["instances"]
    assert KEYS <= set(inst)
    assert inst["kv_usage_ratio"] == 0.4875 and inst["preemptions"] is None


def test_inspect_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(DATA / "llamacpp_b5600-era_no_labels_pr13196.prom")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dialect: llamacpp")
    assert "prompt_tokens                  143" in out and "kv_usage_ratio                 null" in out


def test_inspect_stdin() -> None:
    text = (DATA / "synthetic_tgi_3.x.prom").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "inspect", "-", "--json"],
        cwd=ROOT,
        input=text.encode(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    doc = json.loads(proc.stdout)
    assert doc["dialect"] == "tgi" and doc["instances"][0]["kv_usage_ratio"] == 0.75


def test_inspect_url(capsys: pytest.CaptureFixture[str]) -> None:
    body = TRITON.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        assert main(["inspect", url, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["instances"][0]["kv_capacity_blocks"] == 6239
    finally:
        server.shutdown()
        server.server_close()


def test_inspect_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "ftp://host/metrics"]) == 1
    assert "only http and https" in capsys.readouterr().err
    assert main(["inspect", str(DATA / "missing.prom")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["inspect", "http://nonexistent.invalid:9/metrics", "--timeout", "5s"]) == 1
    assert "dns" in capsys.readouterr().err


def test_run_rejects_bad_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "at least one --target" in capsys.readouterr().err
    assert main(["--target", "file:///etc/passwd"]) == 2
    assert "only http and https" in capsys.readouterr().err
    assert main(["--target", "http://a:1/", "--target", "http://a:1/other"]) == 2
    assert "duplicate target names" in capsys.readouterr().err


def test_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for word in (
        "--target",
        "[NAME=]URL",
        "--listen",
        "127.0.0.1:9400",
        "--interval",
        "--dialect",
        "--record",
        "inspect",
        "honor_labels",
    ):
        assert word in out


@pytest.mark.parametrize(
    "modules,absent",
    [
        # the sidecar: nothing heavy, no other kvscope package
        (
            ("exporter.cli", "exporter.app", "exporter.serve", "exporter.inspect_cmd"),
            ("torch", "locust", "pandas", "numpy", "reference_engine", "harness", "loadtests", "dashboards"),
        ),
        # the command line starts fast, and a parser process stays small
        (
            (
                "exporter.cli",
                "exporter.parser_process",
                "exporter.units",
                "exporter.defaults",
                "exporter.quantities",
                "exporter.parse",
                "exporter.dialects",
                "exporter.credentials",
            ),
            ("aiohttp", "prometheus_client"),
        ),
    ],
)
def test_exporter_imports_stay_light(modules: tuple[str, ...], absent: tuple[str, ...]) -> None:
    code = (
        f"import sys, {', '.join(modules)}\n"
        f"loaded = [m for m in {absent!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
