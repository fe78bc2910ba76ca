"""Readers for the real vLLM 0.32 (CPU) captures in tests/fixtures/vllm-0.32-cpu (README there):
its `/metrics` expositions as families, its OTLP export bodies and its KV event frames, all
as the server sent them. Families are read with prometheus_client's own parser, so the
fixture is never seen through kvscope's parser when it is the yardstick."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu"
EXPOSITIONS = ("metrics_idle.txt", "metrics_during_load.txt", "metrics_after_load.txt")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: its type, the label names its samples carry (`le` aside) and, for a
    histogram, its finite bucket bounds."""

    type: str
    labels: frozenset[str]
    buckets: tuple[float, ...]


def families(text: str) -> dict[str, Family]:
    out = {}
    for f in text_string_to_metric_families(text):
        labels: set[str] = set()
        bounds: set[float] = set()
        for s in f.samples:
            labels |= set(s.labels) - {"le"}
            if s.name.endswith("_bucket") and s.labels.get("le", "+Inf") != "+Inf":
                bounds.add(float(s.labels["le"]))
        out[f.name] = Family(f.type, frozenset(labels), tuple(sorted(bounds)))
    return out


def series(text: str, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of `family` (a sample name: `vllm:num_preemptions_total`) by its labels."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == family
    }


def value(text: str, family: str) -> float:
    """The sum of a family's samples (one engine here; a labelled counter summed over labels)."""
    return sum(series(text, family).values())


def exposition(name: str) -> str:
    return (FIXTURE / name).read_text()


def otlp_posts() -> list[Path]:
    """The export bodies in the order vLLM posted them (start-up spans first, then requests)."""
    return sorted(
        FIXTURE.glob("otlp_post*.pb"), key=lambda p: int(p.name.split(".")[0].removeprefix("otlp_post"))
    )


def frames(name: str) -> list[list[bytes]]:
    """A `*.frames.jsonl` file: one ZeroMQ multipart message a line, its frames in hex."""
    return [
        [bytes.fromhex(f) for f in json.loads(line)] for line in (FIXTURE / name).read_text().splitlines()
    ]


def live_frames() -> list[list[bytes]]:
    return frames("kv_events.frames.jsonl")


def replay_frames() -> list[list[bytes]]:
    return frames("kv_events_replay.frames.jsonl")


def requests() -> dict:
    return json.loads((FIXTURE / "requests.json").read_text())
