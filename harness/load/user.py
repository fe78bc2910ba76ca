"""`LLMUser`: a Locust user that streams OpenAI-compatible chat or completion requests.

Per request it records (see `harness.workload.record` for the schema): wall-clock send time,
TTFT, every inter-token gap, E2E, prompt and output tokens from the server's `usage`
(or a chunk count, marked `usage_source="client_count"`, when a server gives none),
finish reason, status, error class and the server's per-request timings (the reference
engine's `kvscope` object, llama.cpp's `timings`). A request whose pooled keep-alive
connection was already closed is sent once more on a fresh one (`harness.load.stale`).
After a connection failure every user of the process waits out the shared backoff before
its next request (`harness.workload.backoff`): a dead target is not hammered at loop speed.

Why it looks the way it does:
- Locust's own event for a `stream=True` request measures only until the headers, so the
  request is made with `catch_response=True` and never "entered": Locust reports nothing for
  it, and this class fires its own events instead — "TTFT <endpoint>" and "E2E <endpoint>"
  (failures under E2E with their error class) — so the web UI and CSVs show real figures
  and the E2E rows count every request exactly once.
- The body is read a socket read at a time (`harness.load.stream_body`, the SSE fast path:
  `harness.workload.sse_blocks`), and the request asks for `Accept-Encoding: identity`: a
  compressed event stream would arrive in bursts.
- Subclasses (the workloads in `loadtests/`) only say *what* to send: `next_request()`,
  or `offsets()` + `request_for_slot()` for open-loop schedules.

Nothing here imports torch: Locust processes stay light (tests check `sys.modules`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from typing import Any, ClassVar

import gevent
from gevent import GreenletExit
from locust import FastHttpUser, events, task

from harness.load.context import RunContext, ServerInfo, context, install
from harness.load.stale import closed_before_response, drop_pooled_connections, finish_body
from harness.load.stream_body import read_stream
from harness.workload.arrivals import ArrivalSchedule, Slot, make_offsets
from harness.workload.calibration import PROBE_SEEDS, PROBE_WORDS, Calibration, fit
from harness.workload.fingerprint import record_columns
from harness.workload.options import add_to_parser, options_for
from harness.workload.prompts import seeded_text
from harness.workload.record import RequestRecord, classify_exception, http_error_class
from harness.workload.request_spec import PATHS, RequestSpec, body
from harness.workload.sse import StreamState, finish
from harness.workload.trace_context import traceparent

install(events)
IDLE_WAIT_S = 0.25  # how often an idle (draining, schedule exhausted) user looks again
# Locust starts users in batches once a second; each closed-loop user's first request waits a
# random share of that, so a batch does not arrive as one wave (nor do the users that waited
# for the calibration together).
START_STAGGER_S = 1.0
CONTEXT_MARGIN_TOKENS = 8  # slack under max_model_len: templates and calibration are approximate


class LLMRequestError(Exception):
    """What Locust's failure table shows: the error class (and status), so failures group
    by class instead of by message."""


def register_workload(name: str) -> None:
    """Add the workload's options to Locust's command line (call once in the locustfile)."""
    options = options_for(name)

    @events.init_command_line_parser.add_listener
    def _(parser: Any, **_: Any) -> None:
        add_to_parser(parser, options, locust=True)


class LLMUser(FastHttpUser):
    abstract = True
    workload: ClassVar[str] = "custom"
    probe_in_system: ClassVar[bool] = False  # calibrate with the text in a system message
    keeps_answer: ClassVar[bool] = False  # collect each answer's text for `finished` (sessions)

    def __init__(self, environment: Any) -> None:
        ctx = context(environment)
        # FastHttpUser reads these while building its session, so set them first.
        self.network_timeout = ctx.opts.request_timeout
        self.connection_timeout = min(10.0, ctx.opts.request_timeout)
        super().__init__(environment)
        self.ctx: RunContext = ctx
        ctx.users_started += 1
        self.rng = random.Random(f"{ctx.opts.seed}:{ctx.worker_index}:{ctx.users_started}")
        self.user_id = f"{ctx.worker_id}.u{ctx.users_started}"
        self.started = False
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
        }
        if ctx.opts.api_key:
            self._headers["Authorization"] = f"Bearer {ctx.opts.api_key}"

    # -- what to send (workloads override) -----------------------------------------------

    def next_request(self) -> RequestSpec | None:
        """The next request of a closed loop; None: nothing to send now (look again later)."""
        raise NotImplementedError

    def finished(self, spec: RequestSpec, rec: RequestRecord, answer: str | None) -> None:
        """Called for every request just before its record is reported (also when the run
        ends it mid-stream), with its answer's text when `keeps_answer`: session workloads
        append the answer to the conversation and fill in the record's session columns."""

    def offsets(self) -> Iterable[tuple[float, Any]] | None:
        """The global open-loop schedule (offset seconds, payload), or None for a closed loop."""
        o = self.ctx.opts
        return make_offsets(o.arrival, o.rate, o.seed) if o.rate > 0 else None

    def request_for_slot(self, slot: Slot) -> RequestSpec | None:
        return self.next_request()

    def option(self, dest: str) -> Any:
        return getattr(self.ctx.options, dest)

    def fit_lengths(self, prompt_tokens: int, output_tokens: int) -> tuple[int, int]:
        """Shrink (prompt, output) to fit the server's context limit, output first."""
        limit = self.ctx.server.max_model_len if self.ctx.server else None
        room = max(2, (limit or 0) - CONTEXT_MARGIN_TOKENS)
        if not limit or prompt_tokens + output_tokens <= room:
            return prompt_tokens, output_tokens
        output_tokens = max(
            1, min(output_tokens, room - prompt_tokens if prompt_tokens < room else room // 4)
        )
        return max(1, min(prompt_tokens, room - output_tokens)), output_tokens

    @property
    def calibration(self) -> Calibration:
        return self.ctx.calibration or Calibration()

    # -- the loop -------------------------------------------------------------------------

    def wait_time(self) -> float:
        ctx = self.ctx
        if ctx.draining or (ctx.schedule is not None and ctx.schedule.exhausted):
            return IDLE_WAIT_S
        return 0.0 if ctx.opts.rate > 0 or ctx.schedule is not None else ctx.opts.think_time

    @task
    def one_request(self) -> None:
        ctx = self.ctx
        if ctx.draining:
            return
        self._setup()
        self._sleep(ctx.backoff.until_unix)
        if ctx.draining:
            return
        if ctx.schedule is None:
            if not self.started:
                self.started = True
                self._sleep(time.time() + self.rng.uniform(0.0, START_STAGGER_S))
                if ctx.draining:
                    return
            spec = self.next_request()
            if spec is not None:
                self.send(spec)
            return
        slot = ctx.schedule.claim()
        if slot is None:
            return
        self._sleep(slot.scheduled_unix)
        spec = None if ctx.draining else self.request_for_slot(slot)
        if spec is not None:
            self.send(spec, slot)

    def _sleep(self, until_unix: float) -> None:
        """Sleep until `until_unix` in short steps, so a drain (or a graceful stop) is not kept
        waiting by a request due far ahead."""
        while not self.ctx.draining and (delay := until_unix - time.time()) > 0:
            gevent.sleep(min(delay, IDLE_WAIT_S))

    def _setup(self) -> None:
        """Once per test and worker: discover the model, calibrate, build the schedule.
        The first user does it; the others wait on the lock (nothing is sent before)."""
        ctx = self.ctx
        if ctx.server is not None:
            return
        with ctx.setup_lock:
            if ctx.server is not None:
                return
            server = self._discover()
            ctx.server = server
            ctx.calibration = self._calibrate() if ctx.opts.calibrate else Calibration()
            offsets = self.offsets()
            if offsets is not None:
                ctx.schedule = ArrivalSchedule(offsets, ctx.t0_unix, ctx.worker_index, ctx.worker_count)

    def _discover(self) -> ServerInfo:
        want = self.ctx.opts.model
        try:
            resp = self.client.request("GET", "/v1/models", headers=self._headers, catch_response=True)
            cards = (json.loads(resp.content or b"{}").get("data") or []) if resp.status_code == 200 else []
        except Exception:  # discovery is best effort; the requests themselves will report errors
            cards = []
        card = next((c for c in cards if c.get("id") == want), cards[0] if cards and not want else None)
        limit = card.get("max_model_len") if isinstance(card, dict) else None
        model = want or (card.get("id") if isinstance(card, dict) else None) or "default"
        return ServerInfo(model=model, max_model_len=limit if isinstance(limit, int) else None)

    def _calibrate(self) -> Calibration:
        points = []
        for words, seed in zip(PROBE_WORDS, PROBE_SEEDS):
            text = seeded_text(seed, words)
            spec = (
                RequestSpec(prompt="Hi", system=text, max_tokens=1, phase="calibration")
                if self.probe_in_system
                else RequestSpec(prompt=text, max_tokens=1, phase="calibration")
            )
            rec = self.send(spec)
            if rec.ok and rec.prompt_tokens:
                points.append((words, rec.prompt_tokens))
        return fit(points)

    # -- one request ----------------------------------------------------------------------

    def send(self, spec: RequestSpec, slot: Slot | None = None) -> RequestRecord:
        ctx, o = self.ctx, self.ctx.opts
        model = ctx.server.model if ctx.server else (o.model or "default")
        request_body = body(
            spec, o.endpoint, model, o.temperature, o.ignore_eos, seed=self.rng.randrange(1 << 31)
        )
        payload = json.dumps(request_body).encode()
        rec = RequestRecord(
            request_id=ctx.next_request_id(),
            worker_id=ctx.worker_id,
            workload=self.workload,
            endpoint=o.endpoint,
            send_time_unix=0.0,
            target_prompt_tokens=spec.target_prompt_tokens,
            target_output_tokens=spec.target_output_tokens,
            phase=spec.phase,
            n=spec.n,
            prefix_id=spec.prefix_id,
            user_id=self.user_id,
            **record_columns(request_body),
        )
        ctx.in_flight += 1
        answer: list[str] | None = [] if self.keeps_answer else None
        try:
            self._stream(payload, rec, slot, answer)
        except GreenletExit:
            # Locust is stopping this user mid-request (the drain timed out): record the
            # request as aborted, as the server will count it, then let the kill proceed.
            rec.e2e_s = time.time() - rec.send_time_unix if rec.send_time_unix else 0.0
            rec.set_error("aborted", "the run ended while the request was in flight (see --drain-timeout)")
            self.finished(spec, rec, None)
            self._report(rec)
            raise
        except Exception as exc:  # our bug, not the server's: record it rather than lose the request
            rec.set_error("client_error", repr(exc))
        finally:
            ctx.in_flight -= 1
        self.finished(spec, rec, None if answer is None else "".join(answer))
        ctx.backoff.record(rec.error_class, rec.status_code > 0, time.time())
        self._report(rec)
        return rec

    def _stream(
        self, payload: bytes, rec: RequestRecord, slot: Slot | None, answer: list[str] | None
    ) -> None:
        rec.send_time_unix = time.time()
        start = time.perf_counter()
        if rec.phase == "measure" and rec.send_time_unix < self.ctx.warmup_end_unix:
            rec.phase = "warmup"  # sent during --warmup: recorded, kept out of every statistic
        if slot is not None:
            rec.scheduled_time_unix = slot.scheduled_unix
            rec.schedule_lag_s = rec.send_time_unix - slot.scheduled_unix
        headers = self._headers
        if self.ctx.opts.traceparent:  # a retry (below) sends the same one: only one reached the server
            headers = {**headers, "traceparent": traceparent(rec)}
        resp = self._post(rec, payload, headers)
        if not resp.status_code and closed_before_response(getattr(resp, "error", None)):
            rec.retries += 1  # a stale keep-alive connection: nothing reached the server
            drop_pooled_connections(self.client)
            resp = self._post(rec, payload, headers)
        rec.status_code = status = resp.status_code or 0
        if status == 0:
            error = getattr(resp, "error", None) or ConnectionError("no response")
            rec.e2e_s = time.perf_counter() - start
            rec.set_error(classify_exception(error, during_stream=False), repr(error))
            return
        if not 200 <= status < 300:
            rec.e2e_s = time.perf_counter() - start
            rec.set_error(http_error_class(status) or "http_4xx", f"HTTP {status}: {_error_text(resp)}")
            return
        state = StreamState(start=start, answer=answer)
        try:
            read_stream(resp.stream, time.perf_counter, state, rec, self.ctx.opts.request_timeout)
        except Exception as exc:
            state.end = time.perf_counter()
            rec.set_error(classify_exception(exc, during_stream=True), repr(exc))
        finish(state, rec)
        if state.done:
            finish_body(resp.stream)  # after the timings are taken: only the connection's reuse waits

    def _post(self, rec: RequestRecord, payload: bytes, headers: dict[str, str]) -> Any:
        return self.client.request(
            "POST", PATHS[rec.endpoint], data=payload, headers=headers, stream=True, catch_response=True
        )

    def _report(self, rec: RequestRecord) -> None:
        fire = self.environment.events.request.fire
        name = rec.endpoint if rec.phase == "measure" else f"{rec.phase} {rec.endpoint}"
        e2e_ms = (rec.e2e_s if rec.e2e_s == rec.e2e_s else 0.0) * 1000.0
        if rec.ok:
            if rec.ttft_s == rec.ttft_s and rec.phase == "measure":  # not NaN
                fire(
                    request_type="LLM",
                    name=f"TTFT {name}",
                    response_time=rec.ttft_s * 1000.0,
                    response_length=0,
                    exception=None,
                    context={},
                )
            fire(
                request_type="LLM",
                name=f"E2E {name}",
                response_time=e2e_ms,
                response_length=rec.output_tokens or 0,
                exception=None,
                context={},
            )
        else:
            label = rec.error_class if not rec.status_code else f"{rec.error_class} ({rec.status_code})"
            fire(
                request_type="LLM",
                name=f"E2E {name}",
                response_time=e2e_ms,
                response_length=0,
                exception=LLMRequestError(label),
                context={},
            )
        if self.ctx.sender is not None:
            self.ctx.sender.add(rec.to_dict())


def _error_text(resp: Any) -> str:
    """The server's error message, best effort (the body may not have been read)."""
    try:
        text = (resp.content or b"")[:400].decode("utf-8", "replace")
        err = json.loads(text).get("error") if text.startswith("{") else None
        return (err.get("message") if isinstance(err, dict) else None) or text
    except Exception:
        return ""
