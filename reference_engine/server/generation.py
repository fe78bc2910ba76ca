"""One accepted generation request on its way out: what the endpoint and the SSE writer share."""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_engine.engine import TokenLogprob
from reference_engine.server.protocol import GenerateRequest
from reference_engine.server.responses import TokenTexts, prompt_logprob_list


@dataclass(slots=True)
class Generation:
    """One accepted request on its way out. `prompt_text` is what `echo` returns."""

    rid: str
    created: int
    model: str
    req: GenerateRequest
    prompt_ids: list[int]
    prompt_text: str
    texts: TokenTexts
    prompt_logprobs: dict[int, TokenLogprob] = field(default_factory=dict)

    @property
    def chat(self) -> bool:
        return self.req.kind == "chat"

    def echo_logprobs(self) -> list[TokenLogprob | None]:
        return prompt_logprob_list(self.prompt_ids, self.prompt_logprobs)
