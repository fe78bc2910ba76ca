"""Multi-turn chat: each user holds conversations, and every turn re-sends the whole of it.

A session is a system prompt (shared by all sessions with --system-prompts 1), then --turns
turns; each turn sends the system prompt, every earlier message and the server's own earlier
answers, then a new user message of --user-tokens, and asks for --answer-tokens. Between an
answer and the next message the user thinks (--turn-think-time). The growing shared prefix is
what a server's prefix cache keeps, and what it loses when KV memory runs out. With --dataset,
each session replays one ShareGPT conversation's human turns in order instead.

    locust -f loadtests/multi_turn.py --host URL -u 8 --turns 2-8 --turn-think-time exp:5
    locust -f loadtests/multi_turn.py --host URL -u 8 --dataset sharegpt.json --sessions 100
"""

from __future__ import annotations

import random

from harness.load import (
    Opening,
    Session,
    SessionUser,
    Turn,
    WorkloadInputError,
    load_conversations,
    register_workload,
    seeded_text,
)

register_workload("multi_turn")
SYSTEM_SEED_BASE = 2_000_003


class MultiTurnUser(SessionUser):
    workload = "multi_turn"

    def conversations(self) -> list | None:
        """The dataset's conversations in this run's order (seeded), or None without one."""
        path = self.option("dataset")
        if not path:
            return None
        if "conversations" not in self.ctx.cache:
            try:
                found = list(load_conversations(path).conversations)
            except ValueError as exc:
                raise WorkloadInputError(str(exc)) from None
            random.Random(self.ctx.opts.seed).shuffle(found)
            self.ctx.cache["conversations"] = found
        return self.ctx.cache["conversations"]

    def system_prompt(self, number: int, rng: random.Random) -> tuple[str | None, int]:
        tokens = int(self.option("system_tokens"))
        if tokens <= 0:
            return None, 0
        words = self.calibration.words_for(tokens, include_overhead=False)
        shared = int(self.option("system_prompts"))
        if shared <= 0:
            return seeded_text(rng.randrange(1 << 62), words), tokens
        return seeded_text(SYSTEM_SEED_BASE * (self.ctx.opts.seed + 1) + number % shared, words), tokens

    def open_session(self, number: int, rng: random.Random) -> Opening:
        conversations = self.conversations()
        if conversations is not None:
            conversation = conversations[number % len(conversations)]
            system, tokens, turns = conversation.system, conversation.system_tokens, conversation.turns
        else:
            system, tokens = self.system_prompt(number, rng)
            turns = ()
        messages = ({"role": "system", "content": system},) if system else ()
        planned = len(turns) if turns else self.distribution("turns", 1).draw_int(rng)
        return Opening(messages, tokens, planned, turns)

    def next_turn(self, session: Session, rng: random.Random) -> Turn | None:
        answer = self.distribution("answer_tokens", 1)
        if session.script:
            if session.turn >= len(session.script):
                return None
            recorded = session.script[session.turn]
            max_tokens = recorded.answer_tokens or answer.draw_int(rng)
            return Turn(({"role": "user", "content": recorded.text},), max_tokens, recorded.tokens)
        tokens = self.distribution("user_tokens", 1).draw_int(rng)
        message = {"role": "user", "content": self.draw_text(rng, tokens)}
        return Turn((message,), answer.draw_int(rng), tokens)

    def think_time(self, rng: random.Random) -> float:
        return self.distribution("turn_think_time").draw(rng)
