"""report.md and report.html: Advice first, self-contained, every server string escaped, and
the HTML opens in headless Chromium with decoded images and no console errors."""

from __future__ import annotations

import json
import re

import pytest

from harness.advisor.record import Advice, Verdict
from harness.report.write import write_report
from tests.harness.bundle.factory import Spec, make_bundle
from tests.support.browser import CHROMIUM, open_in_chromium

EVIL_MODEL = "<script>alert(1)</script>"
EVIL_TARGET = 'http://x/"><img src=x onerror=alert(2)>'


def _evil_bundle(tmp_path):
    d = make_bundle(tmp_path / "b", Spec(model=EVIL_MODEL, target=EVIL_TARGET, error_every=7))
    return d


def test_markdown_has_advice_first_and_every_section(tmp_path):
    d = _evil_bundle(tmp_path)
    write_report(d)
    md = (d / "report.md").read_text()
    headers = re.findall(r"^## (.+)$", md, flags=re.M)
    assert headers[0] == "Advice"
    for h in (
        "Measurement self-check",
        "Latency",
        "Throughput and goodput",
        "Server and KV cache",
        "Preemptions and latency",
        "Latency by KV usage at send time",
        "Client vs server timing",
        "Errors",
    ):
        assert h in headers
    assert "TTFT p99 was higher after preemptions began" in md
    assert "<script>" not in md and "&lt;script>alert(1)&lt;/script>" in md
    for name in ("latency_cdf", "server_timeline", "throughput"):
        assert f"(plots/{name}.png)" in md and (d / "plots" / f"{name}.png").stat().st_size > 10_000


def test_html_is_self_contained_and_escaped(tmp_path):
    d = _evil_bundle(tmp_path)
    html = write_report(d).read_text()
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert "<link" not in html and "@import" not in html
    assert len(re.findall(r'<img src="data:image/png;base64,', html)) == 3
    assert html.index("<h2>Advice</h2>") < html.index("<h2>Measurement self-check</h2>")


@pytest.mark.skipif(not CHROMIUM, reason="chromium not installed")
def test_html_opens_in_headless_chromium(tmp_path):
    d = _evil_bundle(tmp_path)
    page = open_in_chromium(write_report(d))
    assert page.errors == [], page.errors
    assert page.scripts == 0
    assert len(page.images) == 3
    for img in page.images:
        assert img["ok"] and img["data"] and img["w"] >= 800 and img["h"] >= 300, img
    assert EVIL_MODEL in page.text  # shown as text, literally
    assert "UNRELIABLE" not in page.text


@pytest.mark.skipif(not CHROMIUM, reason="chromium not installed")
def test_the_browser_check_does_see_errors_and_broken_images(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<html><body><img src="data:image/png;base64,AAAA" alt="broken">'
        '<script>console.error("boom"); throw new Error("x")</script></body></html>'
    )
    page = open_in_chromium(bad)
    assert any("boom" in e for e in page.errors) and any(e.startswith("exception") for e in page.errors)
    assert page.images[0]["ok"] is False


def test_advisor_markdown_and_advice_json(tmp_path):
    d = _evil_bundle(tmp_path)
    advice_md = (
        "## Advice\n\n### Verdict\n**Add KV memory** for <b>this</b> model.\n\n"
        "1. quantize\n   - Effect: 2x\n2. cut context"
    )
    html = write_report(d, advice_markdown=advice_md).read_text()
    advice = html[html.index("<h2>Advice</h2>") : html.index("<h2>Measurement self-check</h2>")]
    assert "<h5>Verdict</h5>" in advice and "<strong>Add KV memory</strong>" in advice
    assert "&lt;b&gt;this&lt;/b&gt;" in advice and "<ol><li>quantize\n<ul><li>Effect: 2x" in advice
    assert (
        html.count("<h2>Advice</h2>") == 1 and "<h4>Advice" not in html
    )  # the advisor's own heading is dropped
    md = (d / "report.md").read_text()
    assert re.findall(r"^## (.+)$", md, flags=re.M)[0] == "Advice" and "## Advice\n\n### Verdict" in md
    verdict = Verdict(
        "quantize_kv_cache", "KV cache is the bottleneck <x>", {}, {}, "use fp8 KV — evidence: p99 8x", False
    )
    advice = Advice(str(d), {}, {}, {}, [verdict], [])
    (d / "advice.json").write_text(json.dumps(advice.to_json()))
    html = write_report(d).read_text()
    assert "KV cache is the bottleneck &lt;x&gt;" in html and "use fp8 KV — evidence: p99 8x" in html


def test_sweep_folder_gets_a_sweep_report(tmp_path):
    from harness.sweep.execute import SweepConfig, write_results

    cfg = SweepConfig("concurrency", [1, 4, 16], tmp_path, slo="ttft=500ms")
    rows = [
        {
            "point": i,
            "load_kind": "concurrency",
            "load": c,
            "load_label": f"{c} users",
            "requests": 50,
            "ok": 50,
            "failed": 0,
            "requests_per_s": r,
            "output_tokens_per_s": r * 64,
            "ttft_p50_s": 0.05,
            "ttft_p99_s": t,
            "tpot_p50_s": 0.01,
            "tpot_p99_s": 0.02,
            "e2e_p50_s": e / 2,
            "e2e_p99_s": e,
            "attainment": a,
            "goodput_requests_per_s": r * a,
            "peak_kv_usage_ratio": 0.5,
            "preemptions": 0.0,
            "reliable": True,
            "bundle": f"point-{i:02d}",
        }
        for i, (c, r, t, e, a) in enumerate(
            [(1, 1.0, 0.1, 1.0, 1.0), (4, 3.5, 0.2, 1.2, 0.95), (16, 3.8, 2.0, 5.0, 0.3)]
        )
    ]
    result = write_results(cfg, rows, "completed", "http://x")
    assert result["knee"]["load"] == 4 and result["best"]["load"] == 4
    html = write_report(tmp_path).read_text()
    md = (tmp_path / "report.md").read_text()
    assert re.findall(r"^## (.+)$", md, flags=re.M)[0] == "Advice" and "knee at load 4 users" in md
    assert "highest load meeting the SLOs" in md and (tmp_path / "plots" / "sweep.png").exists()
    assert html.count('<img src="data:image/png;base64,') == 1


def test_a_bundle_with_no_server_samples_or_no_requests_still_reports(tmp_path):
    import pandas as pd

    d = make_bundle(tmp_path / "b", Spec(n_requests=30))
    pd.DataFrame().to_parquet(d / "server.parquet")
    html = write_report(d).read_text()
    assert "No server samples were recorded" in html and html.count("<img") == 2
    e = make_bundle(tmp_path / "e", Spec(n_requests=0))
    html = write_report(e).read_text()
    assert "UNRELIABLE" in html and "no request succeeded" in html and 'alt="latency CDFs"' not in html


def test_an_evidence_table_stays_inside_its_numbered_item():
    from harness.advisor.evidence_table import evidence_rows, markdown_table
    from harness.report.html import markdown_to_html

    rows = evidence_rows({"preemptions": 15, "saturated_share": 0.42, "pool_blocks": 40, "x_<b>": 1.5})
    assert rows == [
        ("preemptions in the run", "15"),
        ("time with the KV cache saturated", "42%"),
        ("KV pool", "40 blocks"),
        ("x <b>", "1.5"),
    ]
    md = "\n".join(
        ["1. **First**", "   - Evidence:", "     ", *markdown_table(rows, "     "), "     ", "2. **Second**"]
    )
    html = markdown_to_html(md)
    assert html.count("<ol>") == 1 and html.count("<table>") == 1  # one list: numbering goes on
    assert html.index("<table>") < html.index("Second") and "<td>42%</td>" in html
    assert "x &lt;b&gt;" in html and "<b>" not in html.replace("<b>First</b>", "")
