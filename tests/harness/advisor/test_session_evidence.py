"""Sessions as the advisor sees them, on hand-built frames: which turns continue which, the
history share of their prompts, the reuse distances between a history's two uses (the curve
a larger pool follows), and the conversations that near max_model_len."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.advisor.conversations import conversation_turns
from harness.advisor.session_advice import context_notes, session_curve
from harness.advisor.session_evidence import session_evidence

BLOCK = 16


def frame(rows: list[tuple]) -> pd.DataFrame:
    """(session, turn, send time, prompt, output, history hash, conversation hash)."""
    cols = [
        "session_id",
        "turn",
        "send_time_unix",
        "prompt_tokens",
        "output_tokens",
        "history_hash",
        "conversation_hash",
    ]
    return pd.DataFrame(rows, columns=cols).assign(cached_tokens=0, e2e_s=0.5)


TWO_CHATS = frame(
    [
        ("a", 0, 0.0, 33, 15, "h", "a0"),
        ("b", 0, 1.0, 33, 15, "h", "b0"),
        ("a", 1, 2.0, 65, 15, "a0", "a1"),
        ("b", 1, 3.0, 65, 15, "b0", "b1"),
    ]
)


def test_a_turn_continues_its_previous_turn_only_when_it_carried_that_conversation() -> None:
    rows = frame(
        [
            ("a", 0, 0.0, 40, 10, "h", "a0"),
            ("a", 1, 1.0, 60, 10, "a0", "a1"),
            ("a", 2, 2.0, 90, 10, "edited", "a2"),  # its history is not turn 1's conversation
            (None, None, 3.0, 50, 10, None, None),
        ]
    )
    turns = conversation_turns(rows)
    assert [t.conversation for t in turns] == [0, 0, 1, -1]
    assert [t.history_tokens for t in turns] == [0, 50, 0, 0]  # turn 0's prompt and answer


def test_the_reuse_distance_of_a_history_is_the_blocks_touched_since_its_last_use() -> None:
    turns = tuple(conversation_turns(TWO_CHATS))
    ev = session_evidence(TWO_CHATS, turns, [(-1, 0)] * 4, BLOCK, pool_blocks=7, max_model_len=4096)
    assert ev is not None
    assert (ev.sessions, ev.continuing_turns, ev.history_tokens) == (2, 2, 96)
    assert ev.history_share == pytest.approx(96 / 196)
    # a's 3 blocks, then b's 3: a's oldest block is 6 blocks deep; then a's turn 1 touches 5,
    # so b's history is 8 deep
    assert (ev.history_distance_p50, ev.history_distance_max) == (7.0, 8.0)
    pools = [(p.pool_blocks, p.history_kept, p.hit_ratio) for p in ev.curve]
    assert pools[0] == (7, 0.5, pytest.approx(48 / 196))  # 6 usable blocks keep a's history only
    assert pools[1] == (9, 1.0, pytest.approx(96 / 196))
    assert pools[-1] == (None, 1.0, pytest.approx(96 / 196))
    # every lookup of a block nobody touched before: the first turns' 2 blocks, the new 4th blocks
    assert ev.first_touches == 2 + 2 + 2


def test_the_curve_becomes_the_misses_a_larger_pool_avoids() -> None:
    turns = tuple(conversation_turns(TWO_CHATS))
    ev = session_evidence(TWO_CHATS, turns, [(-1, 0)] * 4, BLOCK, pool_blocks=7, max_model_len=4096)
    curve = session_curve(ev, TWO_CHATS, BLOCK)
    assert curve is not None and curve.pool_blocks == 7 and curve.queried_tokens == 196
    assert curve.points[0] == (0.25, 2, pytest.approx(3.0))  # b's 3 history blocks
    assert curve.projected(curve.points[0][2]) == pytest.approx(48 / 196)  # the run hit nothing


def test_conversations_near_the_context_limit_are_flagged() -> None:
    turns = tuple(conversation_turns(TWO_CHATS))
    far = session_evidence(TWO_CHATS, turns, [(-1, 0)] * 4, BLOCK, 7, max_model_len=4096)
    near = session_evidence(TWO_CHATS, turns, [(-1, 0)] * 4, BLOCK, 7, max_model_len=88)
    assert far is not None and near is not None
    assert far.longest_conversation_tokens == 80 and far.near_limit_sessions == 0 and not context_notes(far)
    assert near.near_limit_sessions == 2
    assert [n.code for n in context_notes(near)] == ["sessions_near_context_limit"]


def test_a_run_without_sessions_has_no_session_evidence() -> None:
    plain = TWO_CHATS.assign(session_id=None, turn=None)
    turns = tuple(conversation_turns(plain))
    assert session_evidence(plain, turns, [(-1, 0)] * 4, BLOCK, 7, 4096) is None
