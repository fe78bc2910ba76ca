"""The end of a run, whatever happened: run.json (how it ended, what ran, the seed, the
deployment facts), the bundle and summary.json from the raw files, the console summary,
then the advice and the report; and the exit status (`outcome`), which run.json records
and the console's last line states.

With --kv-events the console always gets a `kv events:` line (`run.kv_watch`), and run.json
its `kv_events` (counts, sources, notes with codes); a target lost during the run leaves
`target_lost` (code, when, why).

A run whose target stopped answering ends without the advice and the report (seconds
matter then; `kvscope advise DIR` makes both from the bundle).

The summary is computed before the status is known (the status depends on its error rate
and self-check), so run.json is written twice: first provisionally with the bundle, then
with the outcome. After a second Ctrl-C the advice and the report are skipped (the user
asked to stop); `kvscope advise DIR` makes them later.
"""

from __future__ import annotations

import time
from typing import Any

from harness.analysis.summary import summarize
from harness.bundle.finding import Finding
from harness.bundle.jsonfile import read_json_object, write_json
from harness.bundle.read import read_bundle
from harness.bundle.schema import RUN_JSON, SUMMARY
from harness.bundle.write import write_bundle
from harness.run.config import redact
from harness.run.console import print_summary
from harness.run.deployment import stated_facts
from harness.run.kv_watch import console_line, kv_event_findings
from harness.run.outcome import Outcome, judge
from harness.run.server_facts import recorded_facts
from harness.run.state import Run, RunFailed


def run_info(run: Run, failure: RunFailed | None, master_rc: int | None) -> dict[str, Any]:
    cfg = run.cfg
    ended = time.time()
    deployment, conflicts = recorded_facts(
        cfg.deployment,
        run.stated or stated_facts(run.models, cfg.model),
        run.paths["exporter"],
        cfg.deployment_text,
    )
    run.notes += [Finding("deployment_replaced", c) for c in conflicts]
    kv = run.kv_events_status
    if kv is None and run.kv_watch is not None:  # the run failed before the exporter was asked
        kv = run.kv_watch.final(None)
    run.notes += kv_event_findings(kv)
    return {
        "status": "failed" if failure else "interrupted" if run.interrupts else "completed",
        "failure": str(failure) if failure else None,
        "notes": [n.to_dict() for n in run.notes],
        "seed": cfg.seed,
        "started_unix": run.started_unix,
        "ended_unix": ended,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(run.started_unix)),
        "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(ended)),
        "target": cfg.target or run.target_url,
        "bundled_engine": cfg.target is None,
        "server_models": run.models,
        "deployment": deployment.to_json(),
        "config": cfg.to_dict(),
        "locust_master_exit_code": master_rc,
        "commands": {name: redact(c.argv) for name, c in run.children.items()},
        **({"kv_events": kv} if kv is not None else {}),
        **({"target_lost": run.target_lost} if run.target_lost else {}),
        "serve": run.serve.to_json() if run.serve else None,
    }


def finish(run: Run, failure: RunFailed | None, master_rc: int | None) -> int:
    cfg = run.cfg
    info = run_info(run, failure, master_rc)
    summary: dict[str, Any] | None = None
    try:
        write_bundle(cfg.out, info, run.paths["records"], run.paths["exporter"])
        summary = summarize(read_bundle(cfg.out))
    except Exception as exc:  # keep the raw files and say so, rather than lose the reason
        write_json(cfg.out / RUN_JSON, info)
        run.say(f"error: could not write the bundle ({exc!r}); raw files are in {run.paths['raw']}")
    outcome = judge(
        summary,
        failure=(failure.code, str(failure)) if failure else None,
        interrupted=bool(run.interrupts),
        target_answers=run.target_answers,
        max_error_rate=cfg.max_error_rate,
        fail_on_unreliable=cfg.fail_on_unreliable,
    )
    record_outcome(cfg.out, outcome, summary)
    kv_line = console_line(info["kv_events"]) + "\n" if "kv_events" in info else ""
    if summary is not None:
        print_summary(summary, cfg.out, kv_line)
        if run.target_lost is not None:  # end within seconds: the server is gone, the user waits
            run.say(f"no advice or report (the target was lost): `kvscope advise {cfg.out}` makes both")
        elif summary["client"]["ok"] and run.aborted_at is None:
            postprocess(run)
    elif kv_line:
        run.say(kv_line.strip())
    run.say(outcome.line())
    return int(outcome.code)


def record_outcome(out, outcome: Outcome, summary: dict[str, Any] | None) -> None:
    """The outcome into run.json (`status`, `exit`) and, when there is one, summary.json."""
    try:
        info = read_json_object(out / RUN_JSON)
    except Exception:  # run.json could not be written at all: nothing to update
        return
    info.update(status=outcome.status, exit=outcome.to_json())
    write_json(out / RUN_JSON, info)
    if summary is not None:
        summary["run"]["status"] = outcome.status
        write_json(out / SUMMARY, summary)


def postprocess(run: Run) -> None:
    """The advice and the report (only the report with --no-advise); a failure here is a
    warning: the bundle is written, and `kvscope advise DIR` can retry."""
    out = run.cfg.out
    try:
        if run.cfg.advise:
            from harness.postprocess import advise_and_report

            run.say("advising and writing the report...")
            advice = advise_and_report(out)
            run.say(f"advice: {len(advice['verdicts'])} verdict(s); report: {out / 'report.html'}")
        else:
            from harness.report.write import write_report

            write_report(out)
            run.say(f"report: {out / 'report.html'} (no advice: --no-advise; `kvscope advise {out}` adds it)")
    except Exception as exc:  # the bundle is written; a failed report must not hide that
        run.say(f"warning: could not write the advice and report ({exc!r}); retry with: kvscope advise {out}")
