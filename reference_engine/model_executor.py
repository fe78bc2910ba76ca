"""The real-model executor: one forward pass per step, then sampling per sequence.

Random streams are per choice, keyed by (request group, choice index) and seeded from the
request's seed, so a seeded request gives the same tokens whatever else is in the batch,
and a forked choice keeps drawing from its own stream after the fork.
"""

from __future__ import annotations

import torch

from reference_engine.engine import StepResult, TokenLogprob
from reference_engine.model_runner import ModelRunner
from reference_engine.request import Request
from reference_engine.sampler import Sampler, make_generator
from reference_engine.scheduler_output import ScheduledChunk, SchedulerOutput


class ModelExecutor:
    def __init__(self, runner: ModelRunner, eos_token_ids: tuple[int, ...]):
        self.runner = runner
        self.sampler = Sampler()
        self.eos_token_ids = eos_token_ids
        self._generators: dict[tuple[str, int], tuple[Request, torch.Generator]] = {}

    def execute(self, out: SchedulerOutput) -> StepResult:
        model_out = self.runner.execute(out)
        result = StepResult(sampled={})
        row = 0
        for chunk in out.chunks:
            request = chunk.request
            logits = model_out.prompt_logits.get(request.request_id)
            if logits is not None:
                result.prompt_logprobs[request.request_id] = self._prompt_logprobs(chunk, logits)
            if chunk.samples:
                self._sample(request, model_out.sample_logits[row], result)
                row += 1
        self._forget_finished()
        return result

    def _sample(self, request: Request, logits: torch.Tensor, result: StepResult) -> None:
        params = request.sampling_params
        fork = request.num_output_tokens == 0 and request.index == 0 and params.n > 1
        indices = range(params.n) if fork else (request.index,)
        banned = self.eos_token_ids if request.num_output_tokens < params.min_tokens else ()
        tokens = [
            self.sampler.sample(logits, params, self._generator(request, i), banned_token_ids=banned)[0]
            for i in indices
        ]
        result.sampled[request.request_id] = tokens
        if params.logprobs is not None:
            result.logprobs[request.request_id] = [
                self.sampler.logprobs(logits, t, params.logprobs) for t in tokens
            ]

    def _prompt_logprobs(self, chunk: ScheduledChunk, logits: torch.Tensor) -> dict[int, TokenLogprob]:
        """Row j predicts the token at position start + j + 1; only prompt positions count."""
        request = chunk.request
        top_k = request.sampling_params.prompt_logprobs or 0
        out = {}
        for j in range(logits.shape[0]):
            pos = chunk.start + j + 1
            if pos < request.num_prompt_tokens:
                out[pos] = self.sampler.logprobs(logits[j], request.token_ids[pos], top_k)
        return out

    def _generator(self, request: Request, index: int) -> torch.Generator | None:
        if request.sampling_params.greedy:
            return None
        key = (request.group_id, index)
        entry = self._generators.get(key)
        if entry is None or entry[0].is_finished:
            generator = make_generator(request.sampling_params.seed, index, self.runner.device)
        else:
            generator = entry[1]
        # The owner follows the stream from the parent to the forked child that continues it.
        self._generators[key] = (request, generator)
        return generator

    def _forget_finished(self) -> None:
        for key in [k for k, (req, _) in self._generators.items() if req.is_finished]:
            del self._generators[key]
