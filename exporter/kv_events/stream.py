"""One publisher's batches in sequence order: gaps, replay, restarts (no sockets here).

The publisher numbers batches 0, 1, 2, ... and never repeats a number, so on the live
socket:
- seq == expected: apply it;
- seq > expected: a gap (the PUB or SUB high-water mark dropped messages, or a slow
  joiner): ask for replay from `expected` and hold live batches in `pending` (bounded) until
  the replay ends; without a replay endpoint the missing batches are lost;
- seq < expected: the publisher restarted (a new process starts at 0 with an empty cache):
  the caller's `on_restart` resets the state, then the batch counts as a first one.
The first batch seen asks for replay from 0 when it is not seq 0 (joining a running
publisher rebuilds as much as its buffer still holds; batches older than the buffer are
missed, not lost).

Replayed batches below `expected` are duplicates and skipped; one above it means the
publisher's buffer no longer had the missing ones: those are lost. Every problem is counted
in `problems` by reason; nothing here raises on what a publisher sends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

Apply = Callable[[int, bytes], None]


@dataclass(slots=True)
class EventStream:
    apply: Apply
    on_restart: Callable[[], None]
    can_replay: bool
    max_pending: int = 10_000
    expected: int | None = None
    replaying: bool = False
    joining: bool = False  # the replay asked for at the first batch
    pending: deque[tuple[int, bytes]] = field(default_factory=deque)
    problems: dict[str, int] = field(default_factory=dict)
    applied: int = 0
    replayed: int = 0
    missed_at_join: int = 0

    def count(self, reason: str, n: int = 1) -> None:
        self.problems[reason] = self.problems.get(reason, 0) + n

    def live(self, seq: int, payload: bytes) -> int | None:
        """Take one live batch; returns the seq to ask a replay from, or None."""
        if self.replaying:
            last = self.pending[-1][0] if self.pending else self.expected
            if last is not None and seq <= last:  # restarted while we were replaying
                self.replay_done(timed_out=False)
                return self.live(seq, payload)
            self.pending.append((seq, payload))
            if len(self.pending) > self.max_pending:
                self.pending.popleft()
                self.count("overflow")
            return None
        if self.expected is not None and seq < self.expected:
            self.count("restart")
            self.on_restart()
            self.expected = None
        if self.expected is None:
            if seq > 0 and self.can_replay:
                self._start_replay(seq, payload, joining=True)
                return 0
            self.missed_at_join += seq
            self._apply(seq, payload)
            return None
        if seq > self.expected:
            self.count("gap")
            if self.can_replay:
                self._start_replay(seq, payload, joining=False)
                return self.expected
            self.count("lost", seq - self.expected)
        self._apply(seq, payload)
        return None

    def _start_replay(self, seq: int, payload: bytes, joining: bool) -> None:
        self.replaying, self.joining = True, joining
        self.pending.clear()
        self.pending.append((seq, payload))

    def replay_batch(self, seq: int, payload: bytes) -> None:
        """One batch from the replay socket."""
        if not self.replaying:
            return  # an answer to a request given up on (timed out): its batches came live
        if self.joining and self.expected is None:
            self.missed_at_join += seq
        elif self.expected is not None and seq < self.expected:
            return
        elif self.expected is not None and seq > self.expected:
            self.count("lost", seq - self.expected)
        self.replayed += 1
        self._apply(seq, payload)

    def replay_done(self, timed_out: bool) -> None:
        """The end marker arrived (or the wait gave up): apply the held live batches."""
        if not self.replaying:
            return
        if timed_out:
            self.count("replay_timeout")
        self.replaying = False
        held, self.pending = self.pending, deque()
        for seq, payload in held:
            if self.expected is None:
                self.missed_at_join += seq
            elif seq < self.expected:
                continue
            elif seq > self.expected:
                self.count("lost", seq - self.expected)
            self._apply(seq, payload)

    def _apply(self, seq: int, payload: bytes) -> None:
        self.expected = seq + 1
        self.applied += 1
        self.apply(seq, payload)
