"""What the advisor says about a run's sessions: more blocks to keep histories cached between
turns (add_memory for prefix reuse, from the sessions' reuse-distance curve), and a note when
the conversations come close to max_model_len.

add_memory: the curve (`session_evidence`) stands in for the KV events' miss-ratio curve (a
run recorded with --kv-events uses that one instead): N more blocks hit the difference of the
curve's hit ratios at the two pools, added to the hits the run measured. The rule and its
replay are `kv_curve.add_memory_by_curve`'s, over the session trace (`conversations`): the
replay's baseline is held to the run's hit ratio (`fidelity.hit_ratio_off`).
"""

from __future__ import annotations

import pandas as pd

from exporter.kv_events.curve import POOL_INCREASES
from harness.advisor.conversations import cached_tokens
from harness.advisor.kv_curve import CurveEvidence, add_memory_by_curve
from harness.advisor.record import Verdict
from harness.advisor.session_evidence import NEAR_LIMIT, SessionEvidence
from harness.advisor.whatif import Replayer
from harness.bundle.finding import Finding

SOURCE = "the sessions' reuse distances (requests.parquet)"


def session_curve(ev: SessionEvidence, done: pd.DataFrame, block_size: int) -> CurveEvidence | None:
    """The reuse curve as a miss-ratio curve over the run's completed requests."""
    sized = [p for p in ev.curve if p.pool_blocks is not None]
    unbounded = next((p for p in ev.curve if p.pool_blocks is None), None)
    if len(sized) < 2 or unbounded is None or not ev.queried_tokens:
        return None
    base = sized[0]

    def avoidable(hit_ratio: float) -> float:
        return max(0.0, (hit_ratio - base.hit_ratio) * ev.queried_tokens / block_size)

    send = pd.to_numeric(done["send_time_unix"], errors="coerce")
    end = send + pd.to_numeric(done.get("e2e_s", pd.Series(0.0, index=done.index)), errors="coerce").fillna(0)
    return CurveEvidence(
        target="sessions",
        instance="requests",
        pool_blocks=int(base.pool_blocks or 0),
        block_size=block_size,
        queried_tokens=float(ev.queried_tokens),
        hit_tokens=float(sum(cached_tokens(done))),
        seconds=float(end.max() - send.min()) if len(done) else 0.0,
        capacity_misses=round(avoidable(unbounded.hit_ratio)),
        first_stores=ev.first_touches,
        points=tuple(
            (inc, int(p.pool_blocks or 0) - base.pool_blocks, avoidable(p.hit_ratio))  # type: ignore[operator]
            for inc, p in zip(POOL_INCREASES, sized[1:])
        ),
        source=SOURCE,
    )


def session_add_memory(
    ev: SessionEvidence,
    done: pd.DataFrame,
    block_size: int,
    replayer: Replayer | None,
    kv_pressure: bool,
    notes: list[Finding],
    distrust: Finding | None = None,
) -> Verdict | None:
    """add_memory for prefix reuse between a session's turns (see the module doc)."""
    curve = session_curve(ev, done, block_size)
    return None if curve is None else add_memory_by_curve(curve, replayer, kv_pressure, notes, distrust)


def context_notes(ev: SessionEvidence) -> list[Finding]:
    """The conversations that came close to max_model_len: their next turns will not fit."""
    if not ev.near_limit_sessions or not ev.max_model_len:
        return []
    return [
        Finding(
            "sessions_near_context_limit",
            f"{ev.near_limit_sessions} session(s) reached at least {NEAR_LIMIT:.0%} of max_model_len "
            f"{ev.max_model_len:,} (longest {ev.longest_conversation_tokens:,} tokens): their later turns "
            "will be refused or lose history; a shorter max_model_len would cut them sooner",
            subject="cut_context",
        )
    ]
