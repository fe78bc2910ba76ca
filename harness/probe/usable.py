"""Which ladder observations a fit may use: not a failed request, not one the server preempted
(a lone request the pool cannot hold), not one that ran beside other requests, not one whose
occupancy was never seen above idle; a finding, with its code, for each kind left out."""

from __future__ import annotations

from collections.abc import Sequence

from harness.bundle.finding import Finding
from harness.probe.observation import RequestObservation


def usable_points(obs: Sequence[RequestObservation]) -> tuple[list[RequestObservation], list[Finding]]:
    """The observations a fit may use, and a finding for each kind that it may not."""
    notes: list[Finding] = []
    failed = [o for o in obs if o.error]
    preempted = [o for o in obs if o.preempted]
    crowded = [o for o in obs if not o.error and (o.max_running or 0) > 1]
    flat = [o for o in obs if o.unread]
    if failed:
        notes.append(
            Finding("probe_request_failed", f"{len(failed)} ladder request(s) failed: {failed[0].error}")
        )
    if preempted:
        notes.append(
            Finding(
                "probe_preempted",
                f"{len(preempted)} lone request(s) were preempted (the longest held "
                f"{max(o.kv_tokens for o in preempted):,} tokens): the pool cannot hold one request of "
                "that length, so their occupancy is not their cost; they are left out",
            )
        )
    if crowded:
        notes.append(
            Finding(
                "other_load",
                f"{len(crowded)} ladder request(s) ran beside other requests (up to "
                f"{max(o.max_running or 0 for o in crowded):.0f} running): their occupancy is not theirs "
                "alone; they are left out",
            )
        )
    if flat:
        notes.append(
            Finding(
                "usage_never_rose",
                f"{len(flat)} ladder request(s) never showed usage above the idle level "
                "(too short to be read while alive, or the metric does not count them)",
            )
        )
    bad = {id(o) for o in failed + preempted + crowded + flat}
    return [o for o in obs if id(o) not in bad], notes
