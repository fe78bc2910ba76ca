"""report.md and report.html: Advice first, self-contained, every server string escaped, and
the HTML opens in headless Chromium with decoded images and no console errors."""

from __future__ import annotations

import json
import re

import pytest

from harness.advisor.record import Advice, Verdict, read_advice
from harness.bundle.finding import Finding
from harness.report.write import write_report
from tests.harness.bundle.factory import Spec, make_bundle
from tests.harness.report.outline import html_outline, markdown_outline, titles
from tests.harness.report.sections_before import RUN_SECTIONS
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
    assert titles(markdown_outline(md)) == RUN_SECTIONS  # Advice first, every section
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


def test_the_advice_renders_into_the_reports_blocks_and_is_escaped(tmp_path):
    d = _evil_bundle(tmp_path)
    verdict = Verdict(
        "quantize_kv_cache",
        "KV cache is the bottleneck <x>",
        {"preemptions": 15, "x_<b>": 1.5},
        {},
        "use fp8 KV — evidence: p99 8x",
        False,
        status="indicative",
        status_reason=Finding("replay_off_run", "the replay is <i>off</i>"),
    )
    notes = [Finding("no_kv_pressure", "nothing <script>here</script>")]
    (d / "advice.json").write_text(json.dumps(Advice(str(d), {}, {}, {}, [verdict], notes).to_json()))
    page = write_report(d).read_text()
    advice = page[page.index("<h2>Advice</h2>") : page.index("<h2>Measurement self-check</h2>")]
    assert "<h3>1. KV cache is the bottleneck &lt;x&gt; (quantize_kv_cache, indicative" in advice
    assert "<li>Why indicative: the replay is &lt;i&gt;off&lt;/i&gt;</li>" in advice
    assert "<td>preemptions in the run</td><td>15</td>" in advice and "<td>x &lt;b&gt;</td>" in advice
    assert (
        "<li>nothing &lt;script&gt;here&lt;/script&gt;</li>" in advice and "use fp8 KV — evidence" in advice
    )
    md = (d / "report.md").read_text()
    assert "### 1. KV cache is the bottleneck &lt;x> (quantize_kv_cache, indicative" in md
    assert "| preemptions in the run | 15 |" in md and "- nothing &lt;script>here&lt;/script>" in md


def test_an_advice_json_written_before_findings_had_codes_still_renders(tmp_path):
    """advice.json and run.json from before codes: notes and reasons were bare strings."""
    d = _evil_bundle(tmp_path)
    run = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(
        json.dumps({**run, "status": "failed", "notes": ["the exporter did not come up"]})
    )
    old = {
        "source": str(d), "deployment": {}, "diagnosis": {}, "workload": {},
        "notes": ["cut_context: not advised"],
        "verdicts": [
            {
                "action": "add_memory", "title": "Add KV memory", "evidence": {}, "projected": {},
                "effect": "more blocks", "verified": False, "status": "indicative",
                "status_reason": "the baseline is off", "alternatives": [],
                "replay": {
                    "change": {"label": "more"}, "baseline": {}, "changed": {}, "why": "fewer preemptions",
                },
            }
        ],
        "markdown": "## Advice\n\n(the old rendering)\n",
    }  # fmt: skip
    (d / "advice.json").write_text(json.dumps(old))
    advice = read_advice(d)
    assert advice.notes == [Finding("uncoded", "cut_context: not advised")]
    assert advice.verdicts[0].status_reason == Finding("uncoded", "the baseline is off")
    assert advice.verdicts[0].replay["why"] == {"code": "uncoded", "text": "fewer preemptions"}
    page = write_report(d).read_text()
    for text in (
        "cut_context: not advised",
        "Why indicative: the baseline is off",
        "Replay of more, fewer preemptions",
    ):
        assert text in page
    assert "<li>the exporter did not come up</li>" in page


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
    outline = markdown_outline(md)  # the same blocks in both renderings, the sections as before
    assert outline == html_outline(html) and titles(outline) == ["Advice", "Knee and SLO limit", "Points"]


def test_a_bundle_with_no_server_samples_or_no_requests_still_reports(tmp_path):
    import pandas as pd

    d = make_bundle(tmp_path / "b", Spec(n_requests=30))
    pd.DataFrame().to_parquet(d / "server.parquet")
    html = write_report(d).read_text()
    assert "No server samples were recorded" in html and html.count("<img") == 2
    e = make_bundle(tmp_path / "e", Spec(n_requests=0))
    html = write_report(e).read_text()
    assert "UNRELIABLE" in html and "no request succeeded" in html and 'alt="latency CDFs"' not in html
