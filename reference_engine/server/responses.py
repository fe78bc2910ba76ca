"""OpenAI response shapes: completions and chat, whole responses and stream chunks.

Plain functions from engine events to JSON-ready dicts; no I/O. Field order and names follow
OpenAI's API reference; `kvscope` (server timings) and `prompt_tokens_details.cached_tokens`
ride along on final objects, which OpenAI clients accept as extra fields.

Logprobs: JSON has no -inf, so a logprob below -9999 is reported as -9999.0 (as vLLM does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reference_engine.engine import TokenLogprob
from reference_engine.server.events import Outcome

_FLOOR = -9999.0


def clamp(logprob: float) -> float:
    return logprob if logprob >= _FLOOR else _FLOOR  # also maps NaN to the floor


@dataclass(slots=True)
class TokenTexts:
    """Token id -> its text, cached (bounded by the vocabulary). A token that is part of a
    multi-byte character decodes to U+FFFD on its own; that is what OpenAI shows as well."""

    decode: Callable[[list[int]], str]
    cache: dict[int, str] = field(default_factory=dict)

    def __call__(self, token_id: int) -> str:
        text = self.cache.get(token_id)
        if text is None:
            text = self.cache[token_id] = self.decode([token_id])
        return text


def usage(outcome: Outcome, score_only: bool = False) -> dict:
    completion = 0 if score_only else outcome.completion_tokens
    return {
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": outcome.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": outcome.cached_tokens},
    }


# -- logprobs -------------------------------------------------------------------------


@dataclass(slots=True)
class CompletionLogprobs:
    """The legacy completions `logprobs` object, built up token by token."""

    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)
    offset: int = 0

    def add(self, text: str, logprob: TokenLogprob | None, texts: TokenTexts) -> None:
        self.tokens.append(text)
        self.text_offset.append(self.offset)
        self.offset += len(text)
        if logprob is None:  # the first prompt token (nothing precedes it), or an unscored one
            self.token_logprobs.append(None)
            self.top_logprobs.append(None)
            return
        self.token_logprobs.append(clamp(logprob.logprob))
        top: dict[str, float] = {}
        for t, lp in logprob.top:  # best first; tokens with the same text keep the best value
            top.setdefault(texts(t), clamp(lp))
        top.setdefault(text, clamp(logprob.logprob))  # OpenAI includes the sampled token
        self.top_logprobs.append(top)

    def as_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }


def completion_logprobs(
    token_ids: Sequence[int],
    logprobs: Sequence[TokenLogprob | None],
    texts: TokenTexts,
    start_offset: int = 0,
    acc: CompletionLogprobs | None = None,
) -> CompletionLogprobs:
    acc = acc or CompletionLogprobs(offset=start_offset)
    for token_id, lp in zip(token_ids, logprobs, strict=False):
        acc.add(texts(token_id), lp, texts)
    return acc


def prompt_logprob_list(
    prompt_ids: Sequence[int], by_position: dict[int, TokenLogprob]
) -> list[TokenLogprob | None]:
    return [by_position.get(i) if i > 0 else None for i in range(len(prompt_ids))]


def chat_logprobs(logprobs: Sequence[TokenLogprob], texts: TokenTexts) -> list[dict]:
    def entry(token_id: int, lp: float) -> dict:
        text = texts(token_id)
        return {"token": text, "logprob": clamp(lp), "bytes": list(text.encode("utf-8"))}

    return [
        {**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]}
        for lp in logprobs
    ]


# -- whole responses ----------------------------------------------------------------------


def completion_response(
    rid: str, created: int, model: str, choices: list[dict], outcome: Outcome, score_only: bool
) -> dict:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(outcome, score_only),
        "kvscope": outcome.timing.as_dict(),
    }


def chat_response(rid: str, created: int, model: str, choices: list[dict], outcome: Outcome) -> dict:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(outcome),
        "kvscope": outcome.timing.as_dict(),
    }


def completion_choice(index: int, text: str, logprobs: dict | None, finish_reason: str | None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def chat_choice(index: int, text: str, logprobs: list[dict] | None, finish_reason: str | None) -> dict:
    return {
        "index": index,
        "message": {"role": "assistant", "content": text},
        "logprobs": None if logprobs is None else {"content": logprobs},
        "finish_reason": finish_reason,
    }


# -- stream chunks ------------------------------------------------------------------------


def completion_chunk(rid: str, created: int, model: str, choice: dict) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    index: int,
    delta: dict,
    logprobs: list[dict] | None,
    finish_reason: str | None,
) -> dict:
    choice = {
        "index": index,
        "delta": delta,
        "logprobs": None if logprobs is None else {"content": logprobs},
        "finish_reason": finish_reason,
    }
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }


def usage_chunk(rid: str, created: int, model: str, chat: bool, outcome: Outcome, score_only: bool) -> dict:
    return {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(outcome, score_only),
    }
