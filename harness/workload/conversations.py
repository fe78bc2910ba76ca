"""Multi-turn conversations from a ShareGPT-format file, for the `multi_turn` workload to
replay turn by turn.

The format (ShareGPT, and the many datasets that copy it): a JSON list of objects, each with
`conversations` (or `messages`): a list of {"from": "human"|"gpt"|"system"|..., "value": text}
(or OpenAI-style {"role", "content"}). The human turns are what the replay sends; the
recorded answers are not sent (the server's own answers take their place in the history),
only their length is kept, as the turn's max_tokens (words x 1.3, as `lengths` estimates).

What is skipped, and counted: items that are not conversations, and conversations without
a human turn. A file with none left is a ValueError that says so. Stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.workload.lengths import TOKENS_PER_WORD_ENGLISH

USER_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "model", "bing"})


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """A human message, its length and the length of the answer the dataset recorded for it
    (tokens, estimated; None when the conversation has no answer after it)."""

    text: str
    tokens: int
    answer_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    system: str | None
    turns: tuple[RecordedTurn, ...]

    @property
    def system_tokens(self) -> int:
        return estimate_tokens(self.system) if self.system else 0


@dataclass(frozen=True, slots=True)
class ConversationSet:
    conversations: tuple[Conversation, ...]
    skipped: int  # items that were not conversations with a human turn

    @property
    def turns(self) -> int:
        return sum(len(c.turns) for c in self.conversations)


def estimate_tokens(text: str) -> int:
    """A message's tokens, estimated from its words (at least 1)."""
    return max(1, round(len(text.split()) * TOKENS_PER_WORD_ENGLISH))


def _message(item: object) -> tuple[str, str] | None:
    if not isinstance(item, dict):
        return None
    role = item.get("from", item.get("role"))
    text = item.get("value", item.get("content"))
    return (str(role).lower(), text) if isinstance(text, str) else None


def parse_conversation(item: object) -> Conversation | None:
    """One dataset item as a conversation, or None when it has no human turn."""
    messages = (item.get("conversations") or item.get("messages")) if isinstance(item, dict) else None
    if not isinstance(messages, list):
        return None
    system: str | None = None
    turns: list[RecordedTurn] = []
    for role, text in filter(None, map(_message, messages)):
        if role == "system" and not turns and system is None:
            system = text
        elif role in USER_ROLES:
            turns.append(RecordedTurn(text, estimate_tokens(text)))
        elif role in ASSISTANT_ROLES and turns and turns[-1].answer_tokens is None:
            turns[-1] = RecordedTurn(turns[-1].text, turns[-1].tokens, estimate_tokens(text))
    return Conversation(system, tuple(turns)) if turns else None


def load_conversations(path: str | Path, limit: int = 100_000) -> ConversationSet:
    """The conversations in a ShareGPT-format file (at most `limit`); ValueError naming the
    file when it cannot be read or holds no conversation with a human turn."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read a ShareGPT-format JSON file ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: a ShareGPT-format file is a JSON list of conversations")
    found: list[Conversation] = []
    skipped = 0
    for item in data:
        conversation = parse_conversation(item)
        if conversation is None:
            skipped += 1
            continue
        found.append(conversation)
        if len(found) >= limit:
            break
    if not found:
        raise ValueError(
            f"{path}: no conversation with a human turn among {len(data)} item(s) "
            "(need objects with 'conversations': [{'from': 'human', 'value': ...}, ...])"
        )
    return ConversationSet(tuple(found), skipped)
