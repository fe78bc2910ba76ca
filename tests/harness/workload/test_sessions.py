"""The pieces session workloads are made of: option distributions, a conversation's history
and digests, the end a request forces, the --sessions quota across workers, and ShareGPT
conversations (tests/fixtures/conversations)."""

from __future__ import annotations

import argparse
import random
import statistics

import pytest

from harness.workload.conversations import load_conversations
from harness.workload.distribution import at_least, parse_distribution
from harness.workload.record import RequestRecord
from harness.workload.sessions import Session, SessionQuota, Turn, close_turn, digest, fits
from tests.support.paths import ROOT

CONVERSATIONS = ROOT / "tests" / "fixtures" / "conversations" / "sharegpt_multi_turn.json"


def test_distribution_forms_draw_within_their_bounds_and_means() -> None:
    rng = random.Random(3)
    assert {parse_distribution("4").draw_int(rng) for _ in range(20)} == {4}
    uniform = [parse_distribution("2-6").draw_int(rng) for _ in range(2000)]
    assert set(uniform) == {2, 3, 4, 5, 6}
    assert {parse_distribution("2.2-2.8").draw_int(rng) for _ in range(50)} <= {2, 3}
    exp = [parse_distribution("exp:2").draw(rng) for _ in range(20000)]
    assert min(exp) >= 0 and statistics.mean(exp) == pytest.approx(2.0, rel=0.05)
    lognormal = [parse_distribution("lognormal:64,0.8").draw(rng) for _ in range(20000)]
    assert statistics.mean(lognormal) == pytest.approx(64, rel=0.05) and statistics.median(lognormal) < 64
    assert parse_distribution("exp:0").draw(rng) == 0.0


@pytest.mark.parametrize(
    ("text", "minimum", "message"),
    [
        ("0", 1, "at least 1"),
        ("0-3", 1, "starts below 1"),
        ("5-2", 0, "runs backwards"),
        ("-1", 0, "at least 0"),
        ("exp:-1", 0, "mean of exp"),
        ("lognormal:0,1", 1, "MEAN > 0"),
        ("lognormal:5", 1, "forms"),
        ("many", 1, "forms"),
        ("nan", 0, "finite"),
    ],
)
def test_bad_distributions_are_refused_when_the_command_line_is_read(text, minimum, message) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=at_least(minimum))
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        at_least(minimum)(text)
    assert parser.parse_args(["--turns", "2-6"]).turns == "2-6"  # the text travels on unchanged


def _record(ok=True, prompt=30, output=8, finish="length", error=None) -> RequestRecord:
    rec = RequestRecord("w-1", "w", "multi_turn", "chat", 0.0, prompt_tokens=prompt, output_tokens=output)
    rec.ok, rec.finish_reason, rec.usage_source = ok, finish, "server"
    if error:
        rec.set_error(error, "x")
    return rec


def test_each_turn_carries_the_previous_turn_and_its_answer() -> None:
    session = Session("s0", 3, [{"role": "system", "content": "be brief"}])
    hashes = []
    for k, (question, answer) in enumerate([("hi", "hello"), ("why", "because"), ("ok", "bye")]):
        session.pending = Turn(({"role": "user", "content": question},), 8, 2)
        sent = session.request_messages()
        rec = _record(prompt=30 + 20 * k)
        assert close_turn(session, rec, answer) is None
        assert rec.history_hash == digest(sent[:-1]) and rec.turn == k and rec.session_id == "s0"
        assert rec.conversation_hash == digest([*sent, {"role": "assistant", "content": answer}])
        hashes.append((rec.history_hash, rec.conversation_hash))
    assert all(h == previous for (h, _), (_, previous) in zip(hashes[1:], hashes))
    assert [m["role"] for m in session.history] == ["system"] + ["user", "assistant"] * 3
    assert session.turn == 3 and session.history_tokens() == 70 + 8 + 8


@pytest.mark.parametrize(
    ("rec", "end"),
    [
        (_record(error="stream_error"), "error"),
        (_record(error="aborted"), "stopped"),
        (_record(output=3), "cut"),  # finish "length" with fewer tokens than asked: context full
        (_record(output=3, finish="stop"), None),  # an answer that ended at EOS is whole
        (_record(output=8), None),
    ],
)
def test_the_end_a_request_forces_on_its_session(rec, end) -> None:
    session = Session("s0", 4)
    session.pending = Turn(({"role": "user", "content": "q"},), 8, 1)
    assert close_turn(session, rec, "a") == end
    assert (session.turn, rec.conversation_hash is None) == ((0, True) if end else (1, False))


def test_a_turn_fits_the_context_with_its_answer_and_a_margin() -> None:
    assert fits(100, 20, None, 8) and fits(100, 20, 128, 8) and not fits(101, 20, 128, 8)
    session = Session("s0", 4, prompt_tokens=100, output_tokens=20)
    assert session.estimated_prompt_tokens(Turn(({"role": "user", "content": "q"},), 8, 10), 0) == 146


def test_a_prompt_that_grew_more_than_estimated_holds_the_next_estimate_to_that_growth() -> None:
    """The answer sent back as text counted 10 more tokens than generated: the next turn is
    estimated at the last prompt plus its measured growth, not the shorter sum of parts."""
    session, turn = Session("s0", 4), Turn(({"role": "user", "content": "q"},), 8, 20)
    session.pending = turn
    session.answered("a", 100, 8)
    session.pending = turn
    session.answered("a", 154, 8)  # the parts say 100 + 8 + 8 + 20 + 8 = 144
    assert session.growth == 54
    assert session.estimated_prompt_tokens(turn, 0) == 208 > 154 + 8 + 8 + 20 + 8


def test_the_session_quota_numbers_sessions_once_across_workers() -> None:
    quotas = [SessionQuota(10, i, 3) for i in range(3)]
    numbers = [[n for n in iter(q.claim, None)] for q in quotas]
    assert sorted(sum(numbers, [])) == list(range(10)) and [len(n) for n in numbers] == [4, 3, 3]
    q = quotas[0]
    assert q.exhausted and not q.done()
    q.ended = 4
    assert q.done()
    assert SessionQuota(1, 2, 3).done()  # a worker with no share is done at once
    unlimited = SessionQuota(0)
    assert [unlimited.claim() for _ in range(5)] == list(range(5)) and not unlimited.exhausted


def test_sharegpt_conversations_keep_human_turns_and_answer_lengths() -> None:
    found = load_conversations(CONVERSATIONS)
    assert found.skipped == 2 and len(found.conversations) == 4 and found.turns == 3 + 2 + 2 + 2
    trip, code, greeting, openai = found.conversations
    assert trip.system == "You are a travel planner who answers in short lists." and trip.system_tokens == 13
    assert [t.text[:12] for t in trip.turns] == ["I have three", "We like food", "And a day tr"]
    assert trip.turns[0].tokens == 17 and trip.turns[2].answer_tokens == 18  # 13 and 14 words x 1.3
    assert code.system is None and greeting.turns[0].text.startswith("Tell me")
    assert greeting.turns[-1].answer_tokens is None  # no answer recorded after the last question
    assert openai.turns[1].text == "And the next one?" and openai.turns[1].answer_tokens == 5


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"conversations": []}, {"x": 1}]', "no conversation with a human turn among 2"),
        ('{"conversations": []}', "a JSON list"),
        ("[{not json", "cannot read"),
    ],
)
def test_a_dataset_without_conversations_is_a_clear_error(tmp_path, content, message) -> None:
    path = tmp_path / "d.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_conversations(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_conversations(tmp_path / "missing.json")
