"""Agent loops: many short calls over a long context that grows by a tool result per step.

Every session opens with the same tool and system preamble (--preamble-tokens, shared by all
sessions, as an agent framework's tool definitions are) and a task message (--task-tokens);
then each of its --steps calls sends the whole context, gets a short answer (--answer-tokens,
the model's "tool call"), and appends it and a tool result of --tool-tokens for the next
call, with no think time. Nearly every prompt token has been sent before: with a prefix cache
that holds the sessions, prefill is a few hundred tokens per call, whatever the context.

    locust -f loadtests/agentic.py --host URL -u 8 --preamble-tokens 4000 --steps 10-30
"""

from __future__ import annotations

import random

from harness.load import Opening, Session, SessionUser, Turn, register_workload, seeded_text

register_workload("agentic")
PREAMBLE_SEED_BASE = 3_000_017


class AgenticUser(SessionUser):
    workload = "agentic"

    def preamble(self) -> str:
        """The preamble text: the same in every session, worker and process of a run (from
        --seed and the calibration, as shared_prefix's prefixes are)."""
        if "preamble" not in self.ctx.cache:
            words = self.calibration.words_for(int(self.option("preamble_tokens")), include_overhead=False)
            self.ctx.cache["preamble"] = seeded_text(PREAMBLE_SEED_BASE * (self.ctx.opts.seed + 1), words)
        return self.ctx.cache["preamble"]

    def open_session(self, number: int, rng: random.Random) -> Opening:
        system = {"role": "system", "content": self.preamble()}
        steps = self.distribution("steps", 1).draw_int(rng)
        return Opening((system,), int(self.option("preamble_tokens")), steps)

    def next_turn(self, session: Session, rng: random.Random) -> Turn | None:
        first = session.turn == 0
        tokens = self.distribution("task_tokens" if first else "tool_tokens", 1).draw_int(rng)
        role = "user" if first else self.option("tool_role")
        message = {"role": role, "content": self.draw_text(rng, tokens)}
        return Turn((message,), self.distribution("answer_tokens", 1).draw_int(rng), tokens)
