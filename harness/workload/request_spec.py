"""What a workload asks for (`RequestSpec`) and the OpenAI request body that carries it.

Workloads produce specs; only `body()` knows the wire format, so chat and completions
stay one code path. Every body asks for `stream_options.include_usage` (token counts come
from the server, not from a client tokenizer) and, unless told otherwise, `ignore_eos`
(vLLM's extension; without it an early EOS makes output lengths miss their target).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.workload.record import Endpoint, Phase

PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(slots=True)
class RequestSpec:
    """`system` is the shared part (a chat system message; for completions it is prepended
    to the prompt); `prompt` is the varying user text. Targets are in server tokens.
    `messages`, when given (session workloads), is the whole chat message list instead of
    `system` and `prompt`; the completions endpoint gets it as a transcript."""

    prompt: str
    max_tokens: int
    system: str | None = None
    n: int = 1
    target_prompt_tokens: int | None = None
    target_output_tokens: int | None = None
    prefix_id: int | None = None
    phase: Phase = "measure"
    messages: list[dict[str, str]] | None = None


def body(
    spec: RequestSpec,
    endpoint: Endpoint,
    model: str,
    temperature: float,
    ignore_eos: bool,
    seed: int | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": model,
        "max_tokens": spec.max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat" and spec.messages is not None:
        out["messages"] = spec.messages
    elif endpoint == "chat":
        messages = [{"role": "system", "content": spec.system}] if spec.system else []
        out["messages"] = messages + [{"role": "user", "content": spec.prompt}]
    elif endpoint == "completions" and spec.messages is not None:
        out["prompt"] = transcript(spec.messages)
    elif endpoint == "completions":
        out["prompt"] = f"{spec.system}\n\n{spec.prompt}" if spec.system else spec.prompt
    else:
        raise ValueError(f"unknown endpoint {endpoint!r} (chat or completions)")
    if spec.n != 1:
        out["n"] = spec.n
    if ignore_eos:
        out["ignore_eos"] = True
    if seed is not None and temperature > 0:
        out["seed"] = seed
    return out


def transcript(messages: list[dict[str, str]]) -> str:
    """A message list as one completions prompt ("role: content" paragraphs, then
    "assistant:"): each turn's prompt still starts with the previous turn's prompt."""
    return "".join(f"{m['role']}: {m['content']}\n\n" for m in messages) + "assistant:"
