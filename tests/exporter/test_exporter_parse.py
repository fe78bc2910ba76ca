"""The tolerant exposition parser: correctness against prometheus_client, and tolerance."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.parse import parse_exposition, parse_labels
from tests.support.synthetic_metrics import demo_engines, vllm_v1_exposition

DATA = Path(__file__).parent / "data" / "metrics"


def oracle(text: str) -> dict[tuple[str, tuple], float]:
    """Samples as prometheus_client's own parser sees them."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def ours(text: str) -> dict[tuple[str, tuple], float]:
    exp = parse_exposition(text)
    return {
        (name, tuple(sorted(labels.items()))): v for name, rows in exp.samples.items() for labels, v in rows
    }


def same(a: dict, b: dict) -> bool:
    # prometheus_client appends `_total` to counter samples that lack it (TGI writes
    # `tgi_request_success`); our parser keeps wire names, so compare without the suffix.
    a, b = ({(n.removesuffix("_total"), lbl): v for (n, lbl), v in d.items()} for d in (a, b))
    return a.keys() == b.keys() and all((math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a)


@pytest.mark.parametrize(
    "path", sorted(p for p in DATA.glob("*.prom") if "openmetrics" not in p.name), ids=lambda p: p.name
)
def test_fixtures_match_prometheus_client(path: Path) -> None:
    text = path.read_text()
    assert same(ours(text), oracle(text))
    assert parse_exposition(text).malformed == 0


def test_synthetic_vllm_matches_prometheus_client() -> None:
    text = vllm_v1_exposition(demo_engines(3, step=4))
    assert same(ours(text), oracle(text))


def test_one_bad_line_loses_only_itself() -> None:
    text = (
        '# TYPE a gauge\na 1\nthis is { not a sample\nb{x="1"} 2\nc{x="unterminated} 3\n'
        'd 1_000\ne{x="1"}\nf{x="1"} 4 5 6\ng 7\n'
    )
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(text))  # the library loses everything
    exp = parse_exposition(text)
    assert {k: [v for _, v in rows] for k, rows in exp.samples.items()} == {
        "a": [1.0],
        "b": [2.0],
        "g": [7.0],
    }
    assert exp.malformed == 5
    assert exp.first_error == "this is { not a sample"


def test_escapes_quotes_braces_and_spaces_in_labels() -> None:
    text = (
        'm{path="C:\\\\x",q="say \\"hi\\"",nl="a\\nb",brace="}{",hash="a # b"} 1\nn{ a = "1" , b="2", } 2\n'
    )
    exp = parse_exposition(text)
    labels, value = exp.samples["m"][0]
    assert labels == {"path": "C:\\x", "q": 'say "hi"', "nl": "a\nb", "brace": "}{", "hash": "a # b"}
    assert value == 1.0
    assert exp.samples["n"][0][0] == {"a": "1", "b": "2"}


def test_openmetrics_exemplars_timestamps_eof_and_created() -> None:
    text = (
        '# TYPE x counter\n# UNIT x seconds\nx_total{a="b"} 3 1700000000.5 # {trace_id="t"} 1 1.7e9\n'
        'x_created{a="b"} 1.7e9\n# EOF\nafter 1\n'
    )
    exp = parse_exposition(text)
    assert exp.openmetrics
    assert exp.samples["x_total"] == [({"a": "b"}, 3.0)]
    assert "after" not in exp.samples and exp.malformed == 0
    assert exp.types == {"x": "counter"}


def test_duplicates_nan_inf_counted() -> None:
    exp = parse_exposition('a{x="1"} 1\na{x="1"} 2\nb NaN\nc +Inf\nd -Inf\n')
    assert exp.samples["a"] == [({"x": "1"}, 1.0)]  # first wins
    assert exp.duplicates == 1
    assert exp.non_finite == 3
    assert math.isnan(exp.samples["b"][0][1]) and exp.samples["c"][0][1] == math.inf


def test_utf8_quoted_metric_name() -> None:
    exp = parse_exposition('{"vllm.kv usage", engine="0"} 0.5\n')
    assert exp.samples["vllm.kv usage"] == [({"engine": "0"}, 0.5)]


def test_label_parser_rejects_garbage() -> None:
    assert parse_labels('a="1",b="2"') == {"a": "1", "b": "2"}
    assert parse_labels("") == {}
    for bad in ("a=1", 'a="1" b="2"', '="x"', 'a="1",,b="2"', '1a="x"'):
        assert parse_labels(bad) is None, bad


def test_crlf_blank_lines_and_help_only_families() -> None:
    exp = parse_exposition("# HELP a doc\r\n# TYPE a gauge\r\n\r\na 5\r\n# HELP empty nothing\n")
    assert exp.samples == {"a": [({}, 5.0)]}
    assert exp.helps["empty"] == "nothing"
    assert exp.malformed == 0
