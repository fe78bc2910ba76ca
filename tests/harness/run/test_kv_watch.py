"""The run's KV event watch, on answers shaped like the exporter's GET /api/v1/kv_events: the
likely cause of silence read off the subscription, the warning due SILENCE_S after the first
successful request (once), the note for a run that ended sooner, and the `kv events:` line."""

from __future__ import annotations

import time

from harness.run import kv_watch
from harness.run.kv_watch import SILENCE_S, KvEventsWatch, console_line, silence_cause

SOURCE = {"name": "t", "endpoint": "tcp://h:5557", "replay_endpoint": None, "topic": "kv",
          "bind": False, "connected": False, "disconnects": 0, "batches": 0, "replayed_batches": 0,
          "problems": {}}  # fmt: skip


def test_the_cause_is_read_off_the_subscription() -> None:
    assert silence_cause(SOURCE)[0] == "kv_events_not_connected"
    assert "tcp://*:PORT" in silence_cause(SOURCE)[1]
    bound = silence_cause({**SOURCE, "bind": True})
    assert bound[0] == "kv_events_not_connected" and "which kvscope binds" in bound[1]
    quiet = silence_cause({**SOURCE, "connected": True})
    assert quiet[0] == "kv_events_no_batches" and "'kv'" in quiet[1] and "prefix caching" in quiet[1]


def test_silence_is_said_once_after_the_first_success(monkeypatch) -> None:
    answers = [{"sources": [SOURCE], "instances": []}]
    monkeypatch.setattr(kv_watch, "fetch", lambda url, timeout_s=2.0: answers[-1])
    said: list[str] = []
    watch = KvEventsWatch("http://exporter")
    watch.poll(100.0, None, said.append)  # no success yet: nothing is expected
    watch.poll(102.0, time.time() - 1.0, said.append)  # too early
    assert said == [] and watch.notes == []
    watch.poll(104.0, time.time() - SILENCE_S - 1.0, said.append)
    watch.poll(106.0, time.time() - SILENCE_S - 3.0, said.append)
    assert len(said) == 1 and said[0].startswith("warning: kv events: t: no KV event batch within 10 s")
    assert [n["code"] for n in watch.notes] == ["kv_events_not_connected"]
    answers.append({"sources": [{**SOURCE, "connected": True, "batches": 3}], "instances": []})
    watch.poll(108.0, time.time() - 20.0, said.append)
    assert watch.first_batch and [n["code"] for n in watch.notes][-1] == "kv_events_late"


def test_the_line_and_the_record_at_the_end() -> None:
    watch = KvEventsWatch("http://exporter", subscriptions=["t=tcp://h:5557"])
    status = watch.final({"sources": [SOURCE], "instances": []})  # ended before the warning
    assert [n["code"] for n in status["notes"]] == ["kv_events_not_connected"]
    assert console_line(status) == "kv events: no batch received (kv_events_not_connected)"
    flowing = KvEventsWatch("http://exporter", subscriptions=["t=tcp://h:5557"]).final(
        {
            "sources": [{**SOURCE, "connected": True, "batches": 7, "replayed_batches": 2,
                         "problems": {"gap": 1, "lost": 0}}],
            "instances": [{"stored_blocks": 30, "removed_blocks": 12},
                          {"stored_blocks": 5, "removed_blocks": 0}],
        }
    )  # fmt: skip
    assert console_line(flowing) == (
        "kv events: 7 batches (2 replayed), 35 blocks stored, 12 removed, 1 gaps, 0 batches lost"
    )
    assert console_line(KvEventsWatch(None).final(None)).startswith("kv events: none subscribed")
    unknown = KvEventsWatch(None, subscriptions=["t=tcp://h:5557"]).final(None)
    assert console_line(unknown).startswith("kv events: unknown (the exporter did not answer")
