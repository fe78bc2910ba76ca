"""A request (one sequence) as the scheduler and KV manager see it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from reference_engine.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"  # waiting again, to be recomputed from scratch
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset(
    {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED}
)


@dataclass(slots=True)
class Request:
    """One sequence. `token_ids` holds prompt then output tokens in one list.

    Invariant (vLLM V1's single rule): the scheduler only ever moves
    `num_computed_tokens` towards `len(token_ids)`; prefill, chunked prefill, decode,
    prefix-cache hits and recompute after preemption are all that one motion.

    A request with `sampling_params.n > 1` is forked after its prefill into `n`
    sequences that share the prompt's blocks; `group_id` and `index` tie each sequence
    to its parent request and choice index.
    """

    request_id: str
    token_ids: list[int]
    num_prompt_tokens: int
    sampling_params: SamplingParams
    arrival_time: float
    group_id: str = ""
    index: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1  # prompt tokens hit in the prefix cache at first admission (-1: not yet)
    num_preemptions: int = 0
    block_hashes: list[bytes] = field(default_factory=list)  # hashes of full blocks, in order
    eos_token_ids: tuple[int, ...] = ()
    # Server-side timings on the engine's clock (monotonic seconds when serving, virtual in a
    # replay), for metrics and per-request timing reports.
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None

    def __post_init__(self) -> None:
        if not self.group_id:
            self.group_id = self.request_id

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def is_finished(self) -> bool:
        return self.status.finished
