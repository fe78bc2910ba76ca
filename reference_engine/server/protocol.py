"""OpenAI request bodies in, validated `GenerateRequest`s out.

The rule: values no field can take (numbers that do not fit a float, NaN and infinities,
lone surrogates, deep nesting) are refused over the whole body by `json_values`; every field
is type-checked here and every value range by `SamplingParams.validate`, so nothing a client
sends can reach the engine thread or raise anything but an `APIError` (a 4xx) naming the
field. JSON booleans are rejected where a number is expected, although Python counts `True`
as an int. Names (`model`, a message's `name`) may not hold control characters: they end up
in logs and error messages.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from reference_engine.sampling_params import InvalidRequestError, SamplingParams
from reference_engine.server.errors import APIError, bad_request
from reference_engine.server.json_values import check_values

Kind = Literal["completion", "chat"]
_ROLES = ("system", "developer", "user", "assistant", "tool")
_INT64 = 1 << 63
_DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(slots=True)
class GenerateRequest:
    """One validated API request, before tokenization.

    `prompt` is the completion prompt (text or token ids) or, for chat, the message list.
    `max_tokens` None means "as many as fit" (chat) or OpenAI's 16 (completions);
    `score_only` is `max_tokens: 0` with `echo`: the prompt is scored and nothing is returned
    from generation (the engine still samples one token, which is dropped).
    `logprobs` is the number of alternatives per token (None: no logprobs at all).
    """

    kind: Kind
    model: str | None
    prompt: str | list[int] | list[dict[str, Any]]
    params: SamplingParams
    max_tokens: int | None
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    score_only: bool = False
    logprobs: int | None = None


def decode_body(raw: bytes) -> dict[str, Any]:
    """JSON object from the request body; invalid UTF-8 or JSON is a 400, and so is any value
    `json_values.check_values` refuses (NaN and Infinity are decoded so that it can name
    their field)."""
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=float)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad_request(f"The request body is not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:  # deeper than the decoder goes: too deep to say where
        raise bad_request("The request body is nested too deeply to decode.") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    check_values(body)
    return body


def _int(
    body: dict, name: str, default: int | None = None, lo: int = -_INT64, hi: int = _INT64 - 1
) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer, got {type(value).__name__}.", name)
    if not lo <= value <= hi:
        raise bad_request(f"'{name}' must be between {lo} and {hi}.", name)
    return value


def _float(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request(f"'{name}' must be a number, got {type(value).__name__}.", name)
    try:
        value = float(value)
    except OverflowError:  # an integer beyond float range (float() raises, it does not give inf)
        value = math.inf
    if not math.isfinite(value):
        raise bad_request(f"'{name}' must be a finite number.", name)
    return value


def _bool(body: dict, name: str, default: bool = False, parent: str | None = None) -> bool:
    """`parent` names the object `body` is nested in (the error's param is the top-level field)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        where = f"{parent}.{name}" if parent else name
        raise bad_request(f"'{where}' must be a boolean, got {type(value).__name__}.", parent or name)
    return value


def _stop(body: dict) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise bad_request("'stop' must be a string or a list of strings.", "stop")


def _unsupported(body: dict) -> None:
    """Parameters this engine cannot honour are refused rather than silently ignored, unless
    they carry their neutral value (clients often send those)."""
    for name in ("presence_penalty", "frequency_penalty"):
        if _float(body, name, 0.0) != 0.0:
            raise bad_request(f"'{name}' is not supported by this engine (only 0).", name)
    if _float(body, "repetition_penalty", 1.0) != 1.0:
        raise bad_request(
            "'repetition_penalty' is not supported by this engine (only 1).", "repetition_penalty"
        )
    for name in ("logit_bias", "tools", "functions"):
        if body.get(name):
            raise bad_request(f"'{name}' is not supported by this engine.", name)
    if body.get("suffix") not in (None, ""):
        raise bad_request("'suffix' is not supported by this engine.", "suffix")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise bad_request("Only response_format {'type': 'text'} is supported.", "response_format")


def _name(value: Any, where: str, param: str) -> str:
    if not isinstance(value, str):
        raise bad_request(f"'{where}' must be a string.", param)
    if _CONTROL.search(value):
        raise bad_request(f"'{where}' must not contain control characters.", param)
    return value


def _model(body: dict) -> str | None:
    model = body.get("model")
    return None if model is None else _name(model, "model", "model")


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true.", "stream_options")
    if not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object.", "stream_options")
    return stream, _bool(options, "include_usage", parent="stream_options")


def _params(
    body: dict, max_tokens: int | None, logprobs: int | None, prompt_logprobs: int | None
) -> SamplingParams:
    # Degenerate values (temperature 1e-30, top_p 1e-45) are the sampler's to handle.
    temperature = _float(body, "temperature", 1.0)
    top_p = _float(body, "top_p", 1.0)
    params = SamplingParams(
        max_tokens=max(1, max_tokens or 1),  # the real value is set once the prompt length is known
        temperature=temperature,
        top_p=top_p,
        seed=_int(body, "seed"),
        n=_int(body, "n", 1, 1, 1 << 20),
        stop=_stop(body),
        ignore_eos=_bool(body, "ignore_eos"),
        min_tokens=_int(body, "min_tokens", 0, 0, 1 << 31),
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
    )
    best_of = _int(body, "best_of")
    if best_of is not None and best_of != params.n:
        raise bad_request("'best_of' is not supported (only best_of == n).", "best_of")
    check(params, check_min_tokens=False)
    return params


def check(params: SamplingParams, check_min_tokens: bool = True) -> None:
    """The engine's own range checks, as a 400. `min_tokens <= max_tokens` is checked only
    once max_tokens is final."""
    saved = params.min_tokens
    if not check_min_tokens:
        params.min_tokens = 0
    try:
        params.validate()
    except InvalidRequestError as exc:
        raise bad_request(str(exc), exc.param) from None
    finally:
        params.min_tokens = saved


def parse_completion(body: dict) -> GenerateRequest:
    model = _model(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list):
        if not prompt or any(isinstance(t, bool) or not isinstance(t, int) for t in prompt):
            raise bad_request(
                "'prompt' must be a string, a list of token ids, or a one-element list of either "
                "(batches of several prompts are not supported).",
                "prompt",
            )
    elif not isinstance(prompt, str):
        raise bad_request("'prompt' must be a string or a list of token ids.", "prompt")
    _unsupported(body)
    stream, include_usage = _stream_flags(body)
    echo = _bool(body, "echo")
    max_tokens = _int(body, "max_tokens", None, 0, 1 << 40)
    logprobs = _int(body, "logprobs", None, 0, 20)
    if max_tokens == 0 and not echo:
        raise bad_request(
            "'max_tokens' must be at least 1 (0 is allowed only with 'echo' to score the prompt).",
            "max_tokens",
        )
    params = _params(body, max_tokens, logprobs, logprobs if echo else None)
    return GenerateRequest(
        "completion",
        model,
        prompt,
        params,
        max_tokens,
        stream,
        include_usage,
        echo,
        max_tokens == 0,
        logprobs,
    )


def _message(i: int, message: Any) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise bad_request(f"'{where}' must be an object.", "messages")
    role = message.get("role")
    if role not in _ROLES:
        raise bad_request(f"'{where}.role' must be one of {', '.join(_ROLES)}.", "messages")
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise bad_request(
                    f"'{where}.content' parts must be {{'type': 'text', 'text': str}} "
                    "(this model reads text only).",
                    "messages",
                )
            parts.append(part["text"])
        content = "\n".join(parts)
    elif content is None and role == "assistant":
        content = ""
    elif not isinstance(content, str):
        raise bad_request(f"'{where}.content' must be a string or a list of text parts.", "messages")
    out = {"role": role, "content": content}
    if message.get("name") is not None:
        out["name"] = _name(message["name"], f"{where}.name", "messages")
    return out


def parse_chat(body: dict) -> GenerateRequest:
    model = _model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list.", "messages")
    messages = [_message(i, m) for i, m in enumerate(messages)]
    _unsupported(body)
    stream, include_usage = _stream_flags(body)
    max_tokens = _int(body, "max_completion_tokens", None, 1, 1 << 40)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", None, 1, 1 << 40)
    top = _int(body, "top_logprobs", None, 0, 20)
    wants_logprobs = _bool(body, "logprobs")
    if top is not None and not wants_logprobs:
        raise bad_request("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs")
    logprobs = (top or 0) if wants_logprobs else None
    params = _params(body, max_tokens, logprobs, None)
    return GenerateRequest(
        "chat", model, messages, params, max_tokens, stream, include_usage, False, False, logprobs
    )


def finalize_max_tokens(req: GenerateRequest, num_prompt_tokens: int, max_model_len: int) -> None:
    """Set `params.max_tokens` now that the prompt length is known.

    Like vLLM: a prompt that leaves no room for one token, or an explicit max_tokens that does
    not fit, is a 400 naming both numbers; a defaulted max_tokens is clipped to what fits.
    """
    param = "messages" if req.kind == "chat" else "prompt"
    room = max_model_len - num_prompt_tokens
    if room < 1:
        raise APIError(
            400,
            f"This model's maximum context length is {max_model_len} tokens, but the prompt has "
            f"{num_prompt_tokens} tokens (at least one must be left for the completion).",
            "invalid_request_error",
            param,
            "context_length_exceeded",
        )
    if req.score_only:
        wanted = 1
    elif req.max_tokens is None:
        wanted = room if req.kind == "chat" else min(_DEFAULT_COMPLETION_MAX_TOKENS, room)
    else:
        wanted = req.max_tokens
    if wanted > room:
        raise APIError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{num_prompt_tokens + wanted} tokens ({num_prompt_tokens} in the prompt, {wanted} for the "
            "completion). Please reduce the prompt or max_tokens.",
            "invalid_request_error",
            "max_tokens",
            "context_length_exceeded",
        )
    req.params.max_tokens = wanted
    if req.score_only:
        req.params.min_tokens = 0
    check(req.params)
