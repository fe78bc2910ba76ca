"""How a run ended, as the exit status `kvscope run` documents and writes into run.json.

One code per way a run can end, so a CI job can tell "the server broke" from "the load
generator could not keep up" from "someone pressed Ctrl-C" without reading logs. When
several apply, the first in this order wins: configuration error, the harness's own
failure, interruption, the target lost, errors above --max-error-rate, an unreliable
measurement under --fail-on-unreliable, completed. A run whose target stopped answering
is reported as such even when its error rate would also exceed the limit: the cause is
more useful than the symptom.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from harness.bundle.finding import Finding, texts

DEFAULT_MAX_ERROR_RATE = 0.01


class Exit(IntEnum):
    COMPLETED = 0
    FAILED = 1  # the harness could not run the test or write the bundle
    CONFIG_ERROR = 2  # a bad command line: nothing was started
    ERRORS = 3  # completed, but more requests failed than --max-error-rate allows (or none succeeded)
    TARGET_UNREACHABLE = 4  # the target did not answer at the start, or stopped answering during the run
    UNRELIABLE = 5  # completed, but the self-check judged the measurement unreliable (--fail-on-unreliable)
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; the bundle holds what was measured until then


# Codes after which the bundle is complete and its figures mean what they say (a sweep
# keeps going after these; the failures above are the run's, not the measurement's).
MEASURED = frozenset({Exit.COMPLETED, Exit.ERRORS, Exit.UNRELIABLE})

EXIT_HELP = "exit status:\n" + "\n".join(
    f"  {code.value:>3}  {text}"
    for code, text in (
        (Exit.COMPLETED, "completed: the error rate is within --max-error-rate"),
        (Exit.FAILED, "the harness failed (Locust did not run, the bundle could not be written)"),
        (Exit.CONFIG_ERROR, "configuration error: nothing was started"),
        (Exit.ERRORS, "completed with more failed requests than --max-error-rate allows (or none succeeded)"),
        (Exit.TARGET_UNREACHABLE, "the target could not be reached, or stopped answering during the run"),
        (Exit.UNRELIABLE, "with --fail-on-unreliable: the self-check found the measurement unreliable"),
        (Exit.INTERRUPTED, "interrupted (Ctrl-C, SIGTERM); the bundle holds what was measured"),
    )
)


@dataclass(frozen=True, slots=True)
class Outcome:
    code: Exit
    reason: Finding  # run.json's exit.reason: {"code": "error_rate_over_limit", "text": ...}

    @property
    def status(self) -> str:
        """run.json's `status`: the code's name in lower case ("completed", "errors", ...)."""
        return self.code.name.lower()

    def to_json(self) -> dict[str, Any]:
        return {"code": int(self.code), "status": self.status, "reason": self.reason.to_dict()}

    def line(self) -> str:
        """The console's last line."""
        return f"exit {int(self.code)} ({self.status}): {self.reason.text}"


def judge(
    summary: dict[str, Any] | None,
    *,
    failure: tuple[int, str] | None = None,
    interrupted: bool = False,
    target_answers: bool = True,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    fail_on_unreliable: bool = False,
) -> Outcome:
    """The outcome of a run (see the module doc for the precedence). `failure` is
    (exit code, message) of a run that could not go on; `summary` is summary.json's content
    (None when the bundle could not be written)."""
    if failure is not None:
        code = Exit(failure[0]) if failure[0] in Exit._value2member_map_ else Exit.FAILED
        return Outcome(code, Finding("run_failed", failure[1]))
    if summary is None:
        return Outcome(
            Exit.FAILED,
            Finding("bundle_not_written", "the bundle could not be written; the raw files are kept"),
        )
    if interrupted:
        return Outcome(
            Exit.INTERRUPTED,
            Finding("interrupted", "interrupted; the bundle holds what was measured until then"),
        )
    errors = summary.get("errors") or {}
    total, failed = int(errors.get("total") or 0), int(errors.get("failed") or 0)
    by_class = ", ".join(f"{k} {v}" for k, v in (errors.get("by_class") or {}).items()) or "none"
    if not target_answers:
        return Outcome(
            Exit.TARGET_UNREACHABLE,
            Finding(
                "target_lost",
                f"the target stopped answering during the run "
                f"({failed} of {total} requests failed: {by_class})",
            ),
        )
    if not total:
        return Outcome(Exit.ERRORS, Finding("no_request_sent", "no request was sent"))
    ok = total - failed
    if ok == 0 or failed / total > max_error_rate:
        return Outcome(
            Exit.ERRORS,
            Finding(
                "error_rate_over_limit",
                f"{failed} of {total} requests failed ({failed / total:.1%} > --max-error-rate "
                f"{max_error_rate:.1%}; {by_class})",
            ),
        )
    check = summary.get("selfcheck") or {}
    if fail_on_unreliable and not summary.get("reliable", True):
        why = "; ".join(texts(check.get("reasons")) or ["see report"])
        return Outcome(Exit.UNRELIABLE, Finding("unreliable_measurement", f"unreliable: {why}"))
    return Outcome(
        Exit.COMPLETED,
        Finding("completed", f"{ok} requests succeeded, {failed} failed (limit {max_error_rate:.1%})"),
    )
