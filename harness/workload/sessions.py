"""A conversation as a load generator holds it: the messages so far, the turn to send next,
and why it ended.

A session is a system prompt (or none) and a sequence of turns; each turn sends the whole
history plus its new message(s) (a user message, or a tool result) and appends the server's
actual answer, so turn k's prompt starts with turn k-1's prompt, answer and all: the growing
shared prefix a prefix cache keeps. Invariants:
- turns are sequential: `Session.turn` counts the requests sent, and a turn is built only
  after the previous one's answer was appended;
- `digest(history)` before a turn equals `digest(previous turn's messages + answer)`, so
  the record can prove the history was carried whole (`history_hash`, `conversation_hash`);
- a session that would overflow the server's context (`max_model_len`) ends before the
  turn that would overflow it, as a client that truncates no history would stop, and says so
  (`SessionEnd` "overflow"); one whose request failed or whose answer the server cut ends
  there too ("error", "cut").

`SessionQuota` numbers sessions across Locust workers: worker i of n starts the sessions
numbered i, i+n, i+2n, ... below the limit, so `--sessions N` means N in all however many
workers run them. Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

# completed: every planned turn answered; overflow: the next turn would not fit the server's
# context; error: a turn's request failed; cut: the server stopped an answer short of its
# max_tokens with finish_reason "length" (its context was full); stopped: the run ended
# while a turn was in flight. A session still open when the run ended has no end.
SessionEnd = Literal["completed", "overflow", "error", "cut", "stopped"]
SESSION_ENDS: tuple[str, ...] = ("completed", "overflow", "error", "cut", "stopped")
# What a chat template adds per message (role markers, separators): SmolLM2's ChatML adds 5,
# Llama 3's 5-6; an overestimate ends a session one turn early rather than sending a 400.
TEMPLATE_TOKENS_PER_MESSAGE = 8
Message = dict[str, str]


def digest(messages: list[Message]) -> str:
    """16 hex digits identifying a message list (roles and contents, in order)."""
    text = json.dumps([[m.get("role"), m.get("content")] for m in messages], ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class Turn:
    """What one turn adds to the conversation: its new messages, about `new_tokens` tokens
    as the server counts them, and the answer length to ask for."""

    messages: tuple[Message, ...]
    max_tokens: int
    new_tokens: int


@dataclass(slots=True)
class Session:
    """`history`: every message so far (system prompt, then each turn's messages and answer).
    `prompt_tokens` / `output_tokens`: the server's counts for the last turn (None before the
    first, or when the server gave none)."""

    session_id: str
    planned_turns: int
    history: list[Message] = field(default_factory=list)
    turn: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    growth: int | None = None  # the last turn's prompt less the one before, as the server counted
    pending: Turn | None = None  # the next turn, drawn when the previous one ended
    end: SessionEnd | None = None
    script: tuple[Any, ...] = ()  # what a replayed session sends, turn by turn (the workload's)

    def request_messages(self) -> list[Message]:
        """The message list of the pending turn: the whole history, then its new messages."""
        assert self.pending is not None and self.end is None
        return [*self.history, *self.pending.messages]

    def history_tokens(self) -> int | None:
        """The tokens the history holds, from the server's own counts: the last prompt and
        its answer (None before the first answer)."""
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens + (self.output_tokens or 0) + TEMPLATE_TOKENS_PER_MESSAGE

    def estimated_prompt_tokens(self, turn: Turn, first_turn_tokens: int) -> int:
        """The prompt tokens of `turn` sent next: the history and the new messages
        (`first_turn_tokens` before any answer)."""
        history = self.history_tokens()
        if history is None:
            return first_turn_tokens
        estimate = history + turn.new_tokens + TEMPLATE_TOKENS_PER_MESSAGE * len(turn.messages)
        # An answer sent back as text can count more tokens than the model generated (a
        # detokenised answer retokenises differently, markedly with a random model): the
        # prompt grew by at least that much last turn, so the next one is held to it too.
        return max(estimate, self.prompt_tokens + self.growth) if self.growth else estimate

    def answered(self, answer: str, prompt_tokens: int | None, output_tokens: int | None) -> str:
        """Append the pending turn and its answer; return the conversation's digest now."""
        assert self.pending is not None
        self.history += [*self.pending.messages, {"role": "assistant", "content": answer}]
        self.turn += 1
        if self.prompt_tokens is not None and prompt_tokens is not None:
            self.growth = prompt_tokens - self.prompt_tokens
        self.prompt_tokens, self.output_tokens = prompt_tokens, output_tokens
        self.pending = None
        return digest(self.history)

    def skip_pending(self) -> None:
        """Drop the pending turn (its request failed) and count it, without an answer: a
        replayed trace sends the session's later turns all the same."""
        self.turn += 1
        self.pending = None


def close_turn(session: Session, rec: Any, answer: str | None) -> SessionEnd | None:
    """Fill a finished request's session columns (a `RequestRecord`) for the session's
    pending turn and, when it succeeded, append the turn and its answer to the history.
    Returns the end the request forces on the session (None: it may go on)."""
    assert session.pending is not None
    rec.session_id, rec.turn = session.session_id, session.turn
    rec.history_hash = digest(session.history)
    end = end_after(rec, session.pending.max_tokens)
    if end is None:
        rec.conversation_hash = session.answered(answer or "", rec.prompt_tokens, rec.output_tokens)
    return end


def end_after(rec: Any, asked_tokens: int) -> SessionEnd | None:
    """The end a finished request forces on its session (a `RequestRecord`), else None."""
    if not rec.ok:
        return "stopped" if rec.error_class == "aborted" else "error"
    short = rec.usage_source == "server" and (rec.output_tokens or 0) < asked_tokens
    if rec.finish_reason == "length" and short:
        return "cut"
    return None


def fits(estimated_prompt: int, max_tokens: int, max_model_len: int | None, margin: int) -> bool:
    """Does a turn of that prompt and answer fit the server's context (unknown: yes)?"""
    return max_model_len is None or estimated_prompt + max_tokens <= max_model_len - margin


@dataclass(slots=True)
class SessionQuota:
    """Session numbers for worker `index` of `count`: index, index + count, ... below
    `limit` (0: no limit). `done()` once every number it handed out has ended."""

    limit: int
    index: int = 0
    count: int = 1
    started: int = 0
    ended: int = 0

    def claim(self) -> int | None:
        number = self.index + self.started * self.count
        if self.limit and number >= self.limit:
            return None
        self.started += 1
        return number

    @property
    def exhausted(self) -> bool:
        return bool(self.limit) and self.index + self.started * self.count >= self.limit

    def done(self) -> bool:
        return self.exhausted and self.ended >= self.started
