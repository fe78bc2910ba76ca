"""The end of a run, whatever happened: run.json (how it ended, what ran, the deployment
facts), the bundle and summary.json from the raw files, the console summary, then the
advice and the report; and the exit status.

Exit status: 0 when requests succeeded; 1 when none did, the bundle could not be written,
or Locust could not run; the failure's own code (2: an unreachable target); 130 after Ctrl-C.
"""

from __future__ import annotations

import time

from harness.analysis.summary import write_summary
from harness.bundle.jsonfile import write_json
from harness.bundle.schema import RUN_JSON
from harness.bundle.write import write_bundle
from harness.run.config import redact
from harness.run.console import print_summary
from harness.run.deployment import stated_facts
from harness.run.server_facts import recorded_facts
from harness.run.state import Run, RunFailed


def finish(run: Run, failure: RunFailed | None, master_rc: int | None) -> int:
    cfg = run.cfg
    ended = time.time()
    status = "failed" if failure else "interrupted" if run.interrupts else "completed"
    deployment, conflicts = recorded_facts(
        cfg.deployment,
        run.stated or stated_facts(run.models, cfg.model),
        run.paths["exporter"],
        cfg.deployment_text,
    )
    run.notes += conflicts
    info = {
        "status": status,
        "failure": str(failure) if failure else None,
        "notes": run.notes,
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
    }
    try:
        write_bundle(cfg.out, info, run.paths["records"], run.paths["exporter"])
        summary = write_summary(cfg.out)
    except Exception as exc:  # keep the raw files and say so, rather than lose the reason
        write_json(cfg.out / RUN_JSON, info)
        run.say(f"error: could not write the bundle ({exc!r}); raw files are in {run.paths['raw']}")
        return 1
    print_summary(summary, cfg.out)
    if summary["client"]["ok"]:
        run.say("advising and writing the report (what-if replays on the simulator)...")
        try:
            from harness.postprocess import advise_and_report

            advice = advise_and_report(cfg.out)
            run.say(f"advice: {len(advice['verdicts'])} verdict(s); report: {cfg.out / 'report.html'}")
        except Exception as exc:  # the bundle is written; a failed report must not hide that
            run.say(
                f"warning: could not write the advice and report ({exc!r}); "
                f"retry with: kvscope advise {cfg.out}"
            )
    if failure:
        return failure.code
    if run.interrupts:
        return 130
    if summary["client"]["ok"] == 0:
        run.say(
            "error: no request succeeded (errors by class: "
            f"{summary['client']['errors_by_class'] or 'none sent'}); see {cfg.out}/logs"
        )
        return 1
    return 0
