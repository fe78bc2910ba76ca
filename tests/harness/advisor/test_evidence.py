"""Workload evidence: prompt fingerprints, prefix sharing (identical and near-identical),
length distributions, and the window diagnosis the advisor adds to the exporter's rules."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.dialects.sample import EngineSample
from harness.advisor.diagnose import diagnose_window, preemption_level, windows_from_samples_api
from harness.advisor.evidence import WorkloadEvidence, length_evidence, round_up_limit
from harness.advisor.prefixes import PromptShape, Sharing, analyse
from harness.workload.fingerprint import MAX_CHUNKS, chunks, fingerprint, prompt_text, record_columns

rng = random.Random(0)
VOCAB = [
    "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)
]


def words(n: int, seed: int) -> str:
    r = random.Random(seed)
    return " ".join(r.choice(VOCAB) for _ in range(n)) + " "


def shapes(texts: list[str]) -> list[PromptShape]:
    return [PromptShape(f.hashes, f.chars) for f in map(fingerprint, texts)]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000))
def test_chunks_cover_the_text_exactly_and_fingerprints_are_bounded(text):
    parts = chunks(text)
    assert len(parts) <= MAX_CHUNKS
    if len(parts) < MAX_CHUNKS:
        assert "".join(parts) == text
    fp = fingerprint(text)
    assert len(fp.hashes) == len(fp.chars) == len(parts) and sum(fp.chars) <= fp.total_chars == len(text)


def test_fingerprints_are_deterministic_salted_and_realign_after_a_differing_span():
    shared = words(300, 1)
    a, b = fingerprint("Time: 9:05. " + shared), fingerprint("Time: 10:05:33 UTC. " + shared)
    assert fingerprint("Time: 9:05. " + shared) == a  # CRC-32 and BLAKE2b: no per-process salt
    assert fingerprint("x", salt=b"run-1").hashes != fingerprint("x", salt=b"run-2").hashes
    # Different lengths of the differing span: fixed-width chunks would never match again;
    # content-defined ones do after a chunk or two.
    common_tail = set(a.hashes) & set(b.hashes)
    assert len(common_tail) >= len(a.hashes) - 3


def test_prompt_text_and_record_columns_follow_the_request_body():
    chat = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "U"}]},
        ]
    }
    assert prompt_text(chat) == "S\x1eU"
    assert prompt_text({"prompt": "P"}) == "P"
    cols = record_columns({"prompt": words(50, 3)})
    assert set(cols) == {"prompt_chunk_hashes", "prompt_chunk_chars", "prompt_chars"}
    assert all(isinstance(h, int) and -(1 << 63) <= h < (1 << 63) for h in cols["prompt_chunk_hashes"])


def test_identical_prefixes_share_and_the_first_request_of_a_group_hits_nothing():
    system = [words(200, 10 + g) for g in range(3)]
    texts = [system[i % 3] + words(30, 100 + i) for i in range(12)]
    res = analyse(shapes(texts))
    for i, r in enumerate(res):
        assert r.hole_start_chars is None and r.near_shared_chars == r.shared_chars
        assert (
            r.shared_chars >= len(system[i % 3]) - 120
        )  # the last partial chunk may merge with the user turn
        assert (r.hit_chars == 0) == (i < 3)
    assert len({r.group for r in res}) == 3 and all(r.group == res[i % 3].group for i, r in enumerate(res))


def test_a_timestamp_in_the_system_prompt_is_a_near_identical_prefix():
    system = words(300, 7)
    texts = [
        f"Now: 2026-01-{1 + i:02d}T{i}:{i * 7 % 60:02d}Z. " + system + words(20, 500 + i) for i in range(20)
    ]
    res = analyse(shapes(texts))
    assert all(r.hit_chars < 40 for r in res)  # nothing a prefix cache can use
    assert all(r.hole_start_chars is not None and r.hole_start_chars < 40 for r in res)
    assert all(r.near_shared_chars >= 0.9 * len(system) for r in res)
    assert sum(r.near_hit_chars for r in res) >= 18 * 0.9 * len(system)
    assert len({r.near_group for r in res}) <= 3 and res[0].near_group >= 0


def test_unrelated_prompts_share_nothing():
    res = analyse(shapes([words(200, 1000 + i) for i in range(30)]))
    assert all(r.shared_chars == r.near_shared_chars == 0 and r.group == r.near_group == -1 for r in res)


def test_a_late_differing_span_with_nothing_shared_after_it_is_not_near_identical():
    system = words(200, 5)
    res = analyse(shapes([system + f"Request id {i * 7919}. " + words(40, 900 + i) for i in range(10)]))
    assert all(r.hole_start_chars is None for r in res)
    assert all(r.shared_chars >= len(system) - 120 for r in res)


def test_the_servers_cached_tokens_correct_a_coarse_fingerprint_per_branch():
    """A 160-token prompt of 135 characters in 2 chunks: the fingerprint sees 20 characters
    (23 tokens) shared, the server served 128 from its cache. Every request of that branch
    shares 128 in the replay, the cold ones too; a shorter stem of the same group keeps its
    own share. A request the fingerprints see sharing nothing but served with cached tokens
    shares what the server put first (a chat template's system turn): such requests are one
    group of their own (id 2, after the fingerprints' 0 and 1), each with its count."""

    def sharing(shared: int, group: int, near_shared: int | None = None, near_group: int | None = None):
        near = near_group is not None
        return Sharing(
            shared,
            0,
            near_shared if near else shared,
            0,
            None,
            None,
            group,
            near_group if near else group,
        )

    rows = [sharing(20, 0)] * 4 + [sharing(10, 0), sharing(0, -1), sharing(20, 0, 100, 1)]
    done = pd.DataFrame({"prompt_tokens": [160] * 7, "cached_tokens": [0, 128, 128, None, 0, 64, 0]})
    evidence = WorkloadEvidence(None, None, tuple(rows), (135,) * 7)
    assert evidence.prefix_groups(done) == [(0, 128)] * 4 + [(0, 11), (2, 64), (0, 128)]
    assert evidence.prefix_groups(done, near=True)[-1] == (1, 128)  # 118 by the fingerprint
    fallback = done.drop(columns="cached_tokens").assign(server_cached_prompt_tokens=[0, 0, 0, 0, 0, 0, 96])
    assert evidence.prefix_groups(fallback) == [(0, 96)] * 4 + [(0, 11), (-1, 0), (0, 96)]  # 0 cached
    assert evidence.prefix_groups(done[["prompt_tokens"]]) == [(0, 23)] * 4 + [(0, 11), (-1, 0), (0, 23)]


@pytest.mark.parametrize(
    ("tokens", "limit"), [(1, 256), (300, 512), (1024, 1024), (1025, 2048), (2840, 3072), (9000, 9216)]
)
def test_context_limits_round_up_to_a_power_of_two_or_to_1k(tokens, limit):
    assert round_up_limit(tokens) == limit


def test_length_evidence_against_max_model_len():
    done = pd.DataFrame({"prompt_tokens": [100] * 998 + [3000, 7000], "output_tokens": [50] * 1000})
    ev = length_evidence(done, 16384)
    assert ev.p50_tokens == 150 and ev.max_tokens == 7050
    assert ev.max_share_of_limit == pytest.approx(7050 / 16384)
    assert ev.suggested_max_model_len == round_up_limit(ev.p999_tokens)
    assert ev.over_suggested == sum(t > ev.suggested_max_model_len for t in (3050, 7050))


@pytest.mark.parametrize(
    ("per_request", "per_minute", "level"),
    [
        (0.0, 0.0, "none"),
        (0.005, 3.0, "occasional"),
        (0.03, 0.5, "occasional"),
        (0.03, 3.0, "warn"),
        (0.2, 3.0, "act"),
        (0.01, 90.0, "act"),
        (None, None, "unknown"),
    ],
)
def test_preemption_levels(per_request, per_minute, level):
    assert preemption_level(per_request, per_minute) == level


def _window(n, **values):
    return [
        (1000.0 + i, EngineSample("m", "0", **{k: (v(i) if callable(v) else v) for k, v in values.items()}))
        for i in range(n)
    ]


def test_waiting_while_kv_usage_is_low_is_not_a_kv_problem():
    w = _window(
        20,
        kv_usage_ratio=0.1,
        requests_waiting=5.0,
        requests_running=2.0,
        preemptions=0.0,
        requests_finished=lambda i: float(i),
        kv_capacity_tokens=100_000.0,
    )
    d = diagnose_window(w, admission_tokens=500)
    assert d.kv_not_bottleneck and not d.kv_pressure and d.waiting_low_usage_share == 1.0


def test_waiting_for_free_blocks_is_kv_pressure_even_below_the_usage_mark():
    # A contiguous pool at 70 %: the 30 % left cannot take one more max_model_len reservation.
    w = _window(
        20,
        kv_usage_ratio=0.7,
        requests_waiting=5.0,
        requests_running=1.0,
        preemptions=0.0,
        requests_finished=lambda i: float(i),
        kv_capacity_tokens=23_000.0,
    )
    d = diagnose_window(w, admission_tokens=16_384)
    assert d.kv_pressure and not d.kv_not_bottleneck and d.waiting_kv_blocked_share == 1.0
    assert not diagnose_window(w).kv_pressure  # without the admission size, usage alone decides


def test_steady_preemption_is_pressure_and_the_exporter_rules_are_run():
    w = _window(
        30,
        kv_usage_ratio=0.99,
        requests_waiting=2.0,
        requests_running=8.0,
        preemptions=lambda i: float(i),
        requests_finished=lambda i: float(2 * i),
    )
    d = diagnose_window(w)
    assert d.kv_pressure and d.preemption_level == "act"
    assert d.preemptions_per_finished == pytest.approx(0.5) and d.preemptions_per_minute == pytest.approx(
        60.0
    )
    assert d.exporter_advice["add_memory"] and d.exporter_advice["quantize_kv_cache"]


def test_samples_api_payload_becomes_windows_per_instance():
    payload = {
        "targets": [
            {
                "target": "eng",
                "samples": [
                    {
                        "t": 1.0,
                        "up": True,
                        "instances": [EngineSample("m", "0", kv_usage_ratio=0.5).to_dict()],
                    },
                    {"t": 2.0, "up": False, "instances": []},
                    {
                        "t": 3.0,
                        "up": True,
                        "instances": [
                            EngineSample("m", "0", kv_usage_ratio=0.6).to_dict(),
                            EngineSample("m", "1", kv_usage_ratio=0.1).to_dict(),
                        ],
                    },
                ],
            }
        ]
    }
    w = windows_from_samples_api(payload)
    assert sorted(w) == [("eng", "m", "0"), ("eng", "m", "1")]
    assert [s.kv_usage_ratio for _, s in w[("eng", "m", "0")]] == [0.5, 0.6]
