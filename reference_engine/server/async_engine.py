"""The API server's engine (vLLM V1's `AsyncLLM`): admission, the core client, the output
processor and the metrics, driven from the event loop.

Requests go in through `submit` (checked with the same `check_admission` the core runs, so a
refusal is a 400 before any response bytes), and leave through their `RequestStream`.
`release` is called by every handler when it ends: a request whose client is gone is aborted
in the core, which frees its blocks before its next step.

Two ways the core can end: its step fails (`failed`: it keeps running but refuses work;
requests get 500, /health 500), or its process is gone (`dead`: requests get 503 and
`dead_event` tells the server to shut down with a non-zero status).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from reference_engine.admission import AdmissionLimits, check_admission
from reference_engine.core.client import CoreClient
from reference_engine.core.messages import (
    AbortRequests,
    AddRequest,
    CoreOutputs,
    CoreReady,
    CoreStats,
    StopSequences,
)
from reference_engine.sampling_params import InvalidRequestError
from reference_engine.server.errors import bad_request, engine_dead, engine_failed
from reference_engine.server.events import Admitted, RequestStream, Submission
from reference_engine.server.metrics import LiveGauges, VllmMetrics, cache_config_labels
from reference_engine.server.output_processor import OutputProcessor

log = logging.getLogger("kvscope.server")


class AsyncEngine:
    def __init__(self, client: CoreClient, tokenizer: Any):
        self.client = client
        self.tokenizer = tokenizer  # detokenizes the core's outputs
        self.ready: CoreReady | None = None
        self.limits: AdmissionLimits | None = None
        self.metrics: VllmMetrics | None = None
        self.processor: OutputProcessor | None = None
        self.stats = CoreStats()  # the core's latest record
        self.failed = False
        self.dead = False
        self.dead_event = asyncio.Event()
        self._live: set[str] = set()  # submitted, and the handler has not released them yet
        # Called once each iteration's outputs are routed and observed (the server's garbage
        # collection, `gc_schedule`).
        self.after_pass: Callable[[], None] | None = None
        self._after_pass_due = False  # scheduled for when this loop iteration's writes are done

    async def start(self, served_model_name: str) -> CoreReady:
        """Start the core and wait until it is ready. Raises CoreStartError."""
        ready = await self.client.start(self._on_outputs, self._on_exit)
        self.ready = ready
        # Until the first step's record: an idle pool (every block but the null block free).
        self.stats = CoreStats(num_free_blocks=ready.num_blocks - 1)
        self.limits = AdmissionLimits(
            ready.max_model_len, ready.vocab_size, ready.block_size, ready.num_blocks - 1
        )
        cache_info = cache_config_labels(
            ready.block_size,
            ready.num_blocks,
            ready.kv_cache_dtype,
            ready.enable_prefix_caching,
            ready.allocator,
        )
        gauges = LiveGauges(
            lambda: self.stats.num_running, lambda: self.stats.num_waiting, lambda: self.stats.kv_usage
        )
        self.metrics = VllmMetrics(
            served_model_name,
            ready.max_model_len,
            cache_info,
            gauges,
            kv_cache_metrics=ready.kv_cache_metrics,
        )
        self.processor = OutputProcessor(self.tokenizer, self.metrics)
        return ready

    @property
    def num_in_flight(self) -> int:
        return len(self._live)

    def submit(self, sub: Submission) -> RequestStream:
        """Raises APIError: 400 for a request the engine cannot run, 500/503 if it is down."""
        if self.dead:
            raise engine_dead()
        if self.failed:
            raise engine_failed()
        try:
            check_admission(sub.prompt_token_ids, sub.params, self.limits)
        except InvalidRequestError as exc:
            raise bad_request(str(exc), exc.param) from None
        stream = RequestStream(sub.request_id)
        self.processor.add(sub, stream)
        self._live.add(sub.request_id)
        stream.queue.put_nowait((0.0, [Admitted()]))
        self.client.send(AddRequest(sub.request_id, sub.prompt_token_ids, sub.params, sub.arrival_time))
        return stream

    def route_waiting(self) -> None:
        """Route the core's outputs that have arrived, now: called before a request's bytes
        are parsed (the HTTP server's `before_request`) and before its admission work, so that
        in a burst of arrivals the streams already running are not held back behind it (their
        tokens are written within one request's parsing or admission of arriving, not behind
        the whole burst's)."""
        self.client.deliver_waiting()

    def release(self, stream: RequestStream) -> None:
        """The handler is done with `stream`: abort the request in the core unless it ended."""
        self._live.discard(stream.request_id)
        if self.processor is not None and self.processor.release(stream.request_id):
            self.client.send(AbortRequests([stream.request_id]))

    def abort_all(self) -> None:
        """Abort every in-flight request on the server's behalf (shutdown): unlike a client
        abort, each stream is told, and ends with finish_reason "abort"."""
        if self._live:
            self.client.send(AbortRequests(sorted(self._live)))

    async def stop(self, timeout: float) -> int | None:
        """Shut the core down; its exit status (None for a thread)."""
        status = await self.client.stop(timeout)
        if self.processor is not None:
            self.processor.fail_all(engine_dead())
        return status

    def _on_outputs(self, outputs: CoreOutputs) -> None:
        if outputs.stats is not None:
            self.stats = outputs.stats
        stops = self.processor.process(outputs)
        if stops:
            self.client.send(StopSequences(stops))
        # After the handlers this iteration woke have written; once for however many steps
        # `deliver_waiting` routed in a row.
        if not self._after_pass_due:
            self._after_pass_due = True
            asyncio.get_running_loop().call_soon(self._after_pass)
        if outputs.failure is not None:
            log.error("the engine core failed (%s); refusing further requests", outputs.failure)
            self.failed = True
            self.processor.fail_all(engine_failed())

    def _after_pass(self) -> None:
        self._after_pass_due = False
        self.processor.observe_pending()
        if self.after_pass is not None:
            self.after_pass()

    def _on_exit(self, status: int | None) -> None:
        self.dead = True
        if self.processor is not None:
            self.processor.fail_all(engine_dead())
        self.dead_event.set()
