"""KV events that cannot fail silently: during a run with --kv-events, the exporter's
subscription is read (`GET /api/v1/kv_events` on the run's exporter) until the first batch
arrives. No batch SILENCE_S after the first successful request is said on the console at
once, with the likely cause read off the subscription (never connected, or connected but
sent nothing), and recorded as a note with a stable code. At the end the same answer gives
the console's `kv events:` line and run.json's `kv_events`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.bundle.finding import Finding
from harness.run import procs

SILENCE_S = 10.0
POLL_EVERY_S = 2.0
PATH = "/api/v1/kv_events"
KEPT = ("name", "endpoint", "replay_endpoint", "topic", "bind", "connected", "disconnects", "problems")


def fetch(exporter_url: str | None, timeout_s: float = 2.0) -> dict | None:
    """The exporter's block-level view, or None when it does not answer."""
    if not exporter_url:
        return None
    status, body = procs.http_get(exporter_url + PATH, timeout_s)
    try:
        answer = json.loads(body) if status == 200 else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def totals(answer: dict | None) -> dict[str, Any]:
    """Batches, replays, gaps and lost batches over every source; blocks stored and removed
    over every instance and medium."""
    sources = (answer or {}).get("sources") or []
    instances = (answer or {}).get("instances") or []

    def problems(key: str) -> int:
        return sum(int((s.get("problems") or {}).get(key, 0)) for s in sources)

    return {
        "batches": sum(int(s.get("batches") or 0) for s in sources),
        "replayed_batches": sum(int(s.get("replayed_batches") or 0) for s in sources),
        "gaps": problems("gap"),
        "lost_batches": problems("lost"),
        "stored_blocks": sum(int(i.get("stored_blocks") or 0) for i in instances),
        "removed_blocks": sum(int(i.get("removed_blocks") or 0) for i in instances),
    }


def silence_cause(source: dict) -> tuple[str, str]:
    """(code, text): why a subscribed source has delivered no batch, from what it saw."""
    endpoint, topic = source.get("endpoint"), source.get("topic") or ""
    if not source.get("connected") and not source.get("disconnects"):
        if source.get("bind"):
            return (
                "kv_events_not_connected",
                f"no publisher connected to {endpoint}, which kvscope binds: the server's "
                "--kv-events-config endpoint must be this address",
            )
        return (
            "kv_events_not_connected",
            f"nothing accepted kvscope's connection to {endpoint}: the server does not bind it. An endpoint "
            "without '*' in its --kv-events-config makes vLLM connect instead of bind: set it to "
            "tcp://*:PORT, or give --kv-events auto to let kvscope read it; else the port is wrong or "
            "firewalled",
        )
    return (
        "kv_events_no_batches",
        f"connected to {endpoint} but no batch came: the topic filter {topic!r} may not match the "
        "server's, the server may run without prefix caching (it publishes only with it), or no "
        "request filled a whole block",
    )


@dataclass(slots=True)
class KvEventsWatch:
    exporter_url: str | None
    notes: list[dict] = field(default_factory=list)  # {code, text}: run.json's kv_events.notes
    stated: dict = field(default_factory=dict)  # a --target's GET /kv_event_sources (with auto)
    subscriptions: list[str] = field(default_factory=list)  # the exporter's --kv-events values
    warned_at: float | None = None  # unix time of the silence warning
    first_batch: bool = False
    last_poll: float = 0.0  # monotonic

    def poll(self, now: float, first_ok_unix: float | None, say: Callable[[str], None]) -> None:
        """Called by the watch loop; reads the exporter every POLL_EVERY_S until a batch came."""
        if self.first_batch or first_ok_unix is None or now - self.last_poll < POLL_EVERY_S:
            return
        self.last_poll = now
        answer = fetch(self.exporter_url, 1.0)
        if answer is None:
            return
        if totals(answer)["batches"]:
            self.first_batch = True
            if self.warned_at is not None:
                late = time.time() - first_ok_unix
                self._note("kv_events_late", f"the first KV event batch came {late:.0f} s after the first "
                           f"completed request (the warning was given at {SILENCE_S:g} s)")  # fmt: skip
                say(f"kv events: the first batch came {late:.0f} s after the first completed request")
            return
        if self.warned_at is None and time.time() - first_ok_unix > SILENCE_S:
            self.warned_at = time.time()
            for source in answer.get("sources") or []:
                code, text = silence_cause(source)
                self._note(code, f"{source.get('name')}: no KV event batch within {SILENCE_S:g} s of the "
                           f"first completed request: {text}")  # fmt: skip
                say(f"warning: kv events: {self.notes[-1]['text']} [{code}]")

    def final(self, answer: dict | None) -> dict[str, Any]:
        """run.json's `kv_events` from the exporter's last answer (None: it did not answer).
        A run that ended before the silence warning was due still gets its cause noted."""
        counts = totals(answer)
        sources = (answer or {}).get("sources") or []
        if answer is not None and not counts["batches"] and self.warned_at is None:
            for source in sources:
                code, text = silence_cause(source)
                self._note(code, f"{source.get('name')}: no KV event batch during the run: {text}")
        return {
            **counts,
            "exporter_answered": answer is not None,
            "subscriptions": list(self.subscriptions),
            "stated": self.stated,
            "sources": [{k: s.get(k) for k in KEPT} for s in sources],
            "notes": list(self.notes),
        }

    def _note(self, code: str, text: str) -> None:
        self.notes.append({"code": code, "text": text})


def console_line(status: dict[str, Any]) -> str:
    """The console's `kv events:` line, printed whenever events were asked for."""
    if not status.get("subscriptions"):
        codes = ", ".join(n["code"] for n in status.get("notes") or [])
        return "kv events: none subscribed" + (f" ({codes}; see the notes above)" if codes else "")
    if not status.get("exporter_answered"):
        return "kv events: unknown (the exporter did not answer at the end; see logs/exporter.log)"
    if not status.get("batches"):
        codes = ", ".join(sorted({n["code"] for n in status.get("notes") or []})) or "no batch"
        return f"kv events: no batch received ({codes})"
    return (
        f"kv events: {status['batches']} batches ({status['replayed_batches']} replayed), "
        f"{status['stored_blocks']} blocks stored, {status['removed_blocks']} removed, "
        f"{status['gaps']} gaps, {status['lost_batches']} batches lost"
    )


def kv_event_findings(status: dict[str, Any] | None) -> list[Finding]:
    """run.json's notes for the KV event notes of `final` (their codes: `finding_codes.RELAYED`)."""
    return [
        Finding.from_json({"code": n["code"], "text": f"kv events: {n['text']}"})
        for n in (status or {}).get("notes") or []
    ]
