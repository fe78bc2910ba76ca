"""Per-request sampling parameters, validated at the door so bad input never reaches a step."""

from __future__ import annotations

from dataclasses import dataclass, field


class InvalidRequestError(ValueError):
    """A request the engine refuses; the engine state is untouched when this is raised.

    `param` names the offending parameter (OpenAI's error format carries it).
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None  # top-k logprobs per generated token (0: only the chosen one)
    prompt_logprobs: int | None = None  # same for prompt tokens (OpenAI `echo` + `logprobs`)

    def validate(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidRequestError(
                f"max_tokens must be an integer >= 1, got {self.max_tokens!r}", "max_tokens"
            )
        if not 0.0 <= self.temperature <= 100.0:
            raise InvalidRequestError(
                f"temperature must be in [0, 100], got {self.temperature!r}", "temperature"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}", "top_p")
        if not isinstance(self.n, int) or not 1 <= self.n <= 16:
            raise InvalidRequestError(f"n must be an integer in [1, 16], got {self.n!r}", "n")
        if not isinstance(self.min_tokens, int) or not 0 <= self.min_tokens <= self.max_tokens:
            raise InvalidRequestError(
                f"min_tokens must be in [0, max_tokens], got {self.min_tokens!r}", "min_tokens"
            )
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or not 0 <= value <= 20):
                raise InvalidRequestError(f"{name} must be an integer in [0, 20], got {value!r}", name)
        if any(not isinstance(s, str) or not s for s in self.stop) or len(self.stop) > 8:
            raise InvalidRequestError("stop must be at most 8 non-empty strings", "stop")

    @property
    def greedy(self) -> bool:
        """Below vLLM's sampling epsilon, dividing logits by the temperature overflows to
        inf and softmax gives NaN, so such temperatures mean greedy."""
        return self.temperature < 1e-5
