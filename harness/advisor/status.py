"""A verdict's status from its replay: what a claim may say about itself.

"verified" only when the replay showed what the claim expects and the replay of the run as it
was resembles the run (no `distrust` from `plausibility`, its `fidelity` within tolerance);
"indicative" when the replay shows it over a baseline that misses the run (the reason says
how); "not confirmed" when the replay did not show it. The replay's own record keeps what the
replay found apart from that judgement (`mark_replay`).
"""

from __future__ import annotations

from typing import Any

from harness.advisor.fidelity import Fidelity
from harness.bundle.finding import Finding


def replay_status(
    shown: bool, fidelity: Fidelity | None, distrust: Finding | None = None
) -> tuple[bool, str, Finding | None]:
    """(verified, status, reason)."""
    if not shown:
        return False, "not confirmed", None
    if distrust:
        return False, "indicative", distrust
    if fidelity is None or fidelity.within:
        return True, "verified", None
    return False, "indicative", fidelity.reason


def mark_replay(replay: dict[str, Any], shown: bool, distrust: Finding | None) -> dict[str, Any]:
    """A verdict's replay record says what the replay itself found: `shown`, whether it showed
    what the claim expects, and `implausible`, why the replay of the run as it was is not
    trusted (when it is not). Whether that makes the claim verified is the verdict's `status`."""
    replay["shown"] = shown
    if distrust:
        replay["implausible"] = distrust.to_dict()
    return replay
