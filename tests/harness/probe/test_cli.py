"""`kvscope probe --help` explains what the probe does and writes; bad command lines fail with
one line and exit 2; `kvscope sweep --help` explains --find-max."""

from __future__ import annotations

from tests.harness.analysis.runs import kvscope


def test_help_explains_the_probe_and_the_search():
    rc, out, _ = kvscope("probe", "--help", timeout_s=60)
    assert rc == 0
    for words in (
        "lone requests",
        "tokens-per-block",
        "null",
        "cache_config_info",
        "/slots",
        "probe.json",
        "code",
    ):
        assert words in out, words
    rc, out, _ = kvscope("sweep", "--help", timeout_s=60)
    assert rc == 0 and "--find-max" in out and "bracket" in out and "--repeats" in out and "KV-bound" in out


def test_bad_command_lines(tmp_path):
    rc, out, _ = kvscope("probe", "--target", "ftp://x", timeout_s=60)
    assert rc == 2 and "--target must be an http(s) URL" in out
    rc, out, _ = kvscope("probe", "--target", "http://127.0.0.1:9", "--num-blocks", "8", timeout_s=60)
    assert rc == 2 and "only apply to the bundled engine" in out
    rc, out, _ = kvscope("probe", str(tmp_path), timeout_s=60)
    assert rc == 2 and "error:" in out and "Traceback" not in out
    rc, out, _ = kvscope("probe", "--lengths", "1,x", timeout_s=60)
    assert rc == 2 and "not a comma-separated list" in out
