"""`SessionUser`: a Locust user that holds one conversation at a time and sends its turns in
order, each with the whole history and the server's previous answer (`harness.workload.sessions`).

A user opens a session (numbered by `SessionQuota`, so `--sessions N` counts across workers),
sends turn 0, appends the answer, waits the workload's think time, sends turn 1, and so on
until the session ends (see `SessionEnd`); then, after `--think-time`, it opens the next one.
Sessions interleave across users; a user never has two turns in flight. The draws of a
session (its turns, lengths, texts, think times) come from a generator seeded by the run's
seed and the session's number, so a session is the same whichever user or worker runs it.

When every worker has ended its share of `--sessions N`, the run stops as `-t` would stop it
(`runner.quit()`, with the usual drain); `-t` stays the upper bound. A workload whose input
cannot work (a dataset with no conversation) stops the run the same way, with its reason
logged, instead of failing in every user on every turn.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import gevent
from locust import events

from harness.load.context import RunContext, context
from harness.load.user import CONTEXT_MARGIN_TOKENS, IDLE_WAIT_S, LLMUser
from harness.workload.distribution import Distribution, parse_distribution
from harness.workload.prompts import text
from harness.workload.record import RequestRecord
from harness.workload.request_spec import RequestSpec
from harness.workload.sessions import (
    Message,
    Session,
    SessionEnd,
    SessionQuota,
    Turn,
    close_turn,
    fits,
)

log = logging.getLogger("kvscope.sessions")
SESSIONS_DONE_MSG = "kvscope_sessions_done"


@dataclass(frozen=True, slots=True)
class Opening:
    """How a session starts: its system message(s), their tokens, the turns planned, and
    what a replayed session sends (`Session.script`)."""

    system: tuple[Message, ...]
    system_tokens: int
    planned_turns: int
    script: tuple[Any, ...] = ()


class WorkloadInputError(ValueError):
    """The workload's input cannot make a session (the message says why): the run stops."""


class SessionUser(LLMUser):
    abstract = True
    keeps_answer = True
    probe_in_system = True

    # -- what a session is (workloads override) ------------------------------------------

    def open_session(self, number: int, rng: random.Random) -> Opening:
        raise NotImplementedError

    def next_turn(self, session: Session, rng: random.Random) -> Turn | None:
        """The turn to send after `session.turn` turns (None: the session has no more)."""
        raise NotImplementedError

    def think_time(self, rng: random.Random) -> float:
        """Seconds between an answer and the session's next turn."""
        return 0.0

    def distribution(self, dest: str, minimum: float = 0.0) -> Distribution:
        """The option `dest` as a distribution (checked when the command line was read)."""
        key = f"distribution:{dest}"
        if key not in self.ctx.cache:
            self.ctx.cache[key] = parse_distribution(self.option(dest), minimum)
        return self.ctx.cache[key]

    def draw_text(self, rng: random.Random, tokens: int) -> str:
        """Text of about `tokens` server tokens, to add to a prompt."""
        return text(rng, self.calibration.words_for(tokens, include_overhead=False))

    # -- the loop ------------------------------------------------------------------------

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.session: Session | None = None
        self.session_rng = random.Random()
        self.first_turn_tokens = 0
        self.next_at = 0.0

    def wait_time(self) -> float:
        ctx = self.ctx
        idle = self.session is None and (_quota(ctx).exhausted or ctx.cache.get("sessions_done_sent"))
        if ctx.draining or idle:
            return IDLE_WAIT_S
        return 0.0  # think times are slept in next_request, where a drain cuts them short

    def next_request(self) -> RequestSpec | None:
        if self.session is None and not self._open():
            return None
        self._sleep(self.next_at)
        session = self.session
        if self.ctx.draining or session is None or session.pending is None:
            return None
        turn = session.pending
        estimate = session.estimated_prompt_tokens(turn, self.first_turn_tokens)
        return RequestSpec(
            prompt="",
            messages=session.request_messages(),
            max_tokens=turn.max_tokens,
            target_prompt_tokens=estimate,
            target_output_tokens=turn.max_tokens,
        )

    def _open(self) -> bool:
        ctx = self.ctx
        quota = _quota(ctx)
        number = quota.claim()
        if number is None:
            _tell_if_done(ctx, quota)
            return False
        rng = random.Random(f"{ctx.opts.seed}:session:{number}")
        try:
            opening = self.open_session(number, rng)
            session = Session(
                f"{ctx.worker_id}:s{number}",
                opening.planned_turns,
                list(opening.system),
                script=opening.script,
            )
            turn = self.next_turn(session, rng)
        except WorkloadInputError as exc:
            _stop_run(ctx, f"the {self.workload} workload cannot run: {exc}")
            return False
        if turn is None:  # a session with nothing to send: nothing to count either
            quota.ended += 1
            _tell_if_done(ctx, quota)
            return False
        self.first_turn_tokens = round(self.calibration.overhead) + opening.system_tokens + turn.new_tokens
        _, fitted = self.fit_lengths(self.first_turn_tokens, turn.max_tokens)
        session.pending = Turn(turn.messages, fitted, turn.new_tokens)
        self.session, self.session_rng = session, rng
        return True

    def finished(self, spec: RequestSpec, rec: RequestRecord, answer: str | None) -> None:
        session = self.session
        if session is None or spec.messages is None or session.pending is None:
            return  # a calibration probe
        end = close_turn(session, rec, answer)
        if end is None:
            end = self._plan_next(session)
        if end is not None:
            rec.session_end = session.end = end
            self._close()

    def _plan_next(self, session: Session) -> SessionEnd | None:
        if session.turn >= session.planned_turns:
            return "completed"
        turn = self.next_turn(session, self.session_rng)
        if turn is None:
            return "completed"
        limit = self.ctx.server.max_model_len if self.ctx.server else None
        estimate = session.estimated_prompt_tokens(turn, self.first_turn_tokens)
        if not fits(estimate, turn.max_tokens, limit, CONTEXT_MARGIN_TOKENS):
            return "overflow"
        session.pending = turn
        self.next_at = time.time() + self.think_time(self.session_rng)
        return None

    def _close(self) -> None:
        self.session = None
        self.next_at = time.time() + self.ctx.opts.think_time
        quota = _quota(self.ctx)
        quota.ended += 1
        _tell_if_done(self.ctx, quota)


def _quota(ctx: RunContext) -> SessionQuota:
    """This worker's share of --sessions, made on first use in each test."""
    quota = ctx.cache.get("session_quota")
    if quota is None:
        limit = int(getattr(ctx.options, "sessions", 0) or 0)
        quota = ctx.cache["session_quota"] = SessionQuota(limit, ctx.worker_index, ctx.worker_count)
    return quota


def _tell_if_done(ctx: RunContext, quota: SessionQuota) -> None:
    if quota.done() and not ctx.cache.get("sessions_done_sent"):
        ctx.cache["sessions_done_sent"] = True
        ctx.environment.runner.send_message(SESSIONS_DONE_MSG, {"ended": quota.ended})


def _stop_run(ctx: RunContext, reason: str) -> None:
    if not ctx.cache.get("sessions_done_sent"):
        ctx.cache["sessions_done_sent"] = True
        log.error("%s", reason)
        ctx.environment.runner.send_message(SESSIONS_DONE_MSG, {"error": reason})


def _on_sessions_done(environment: Any, msg: Any, **_: Any) -> None:
    """Master (or the single local process): once every worker has ended its share of the
    sessions, or one says its input cannot work, stop the run as -t does."""
    ctx = context(environment)
    runner = environment.runner
    data = msg.data or {}
    if data.get("error"):
        log.error("stopping the run: %s", data["error"])
    done = ctx.cache.setdefault("workers_done", set())
    done.add(str(msg.node_id))
    workers = {str(c.id) for c in getattr(getattr(runner, "clients", None), "all", ())} or {"local"}
    if (data.get("error") or done >= workers) and not ctx.cache.get("quitting"):
        ctx.cache["quitting"] = True
        log.info("every session has ended: stopping the run")
        gevent.spawn(runner.quit)  # not in this greenlet: quitting stops the users, maybe this one


@events.init.add_listener
def _register(environment: Any, runner: Any = None, **_: Any) -> None:
    runner = runner or environment.runner
    if context(environment).role in ("local", "master"):
        runner.register_message(SESSIONS_DONE_MSG, _on_sessions_done)
