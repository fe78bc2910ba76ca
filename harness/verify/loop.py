"""`kvscope advise --verify DIR` (and `kvscope run --verify`): apply each verdict to the server
that ran, rerun the same load test, and score what the replay predicted against what was
measured.

Order: the advice (made first when the folder has none); the unchanged configuration rerun
once (DIR/verify/baseline: the run-to-run noise, measured); then, per verdict, its change as
the engine's own flags (`changes`), the server restarted with them and the same workload rerun
(DIR/verify/<action>); a change two verdicts share is run once. Each verdict gets its `check`
(`check`), advice.json and the report are rewritten, and the console prints one line per
verdict. A change the engine refuses (the server does not come up with it) is "not applicable"
with the server's own words. Ctrl-C stops the rerun in progress (its server included) and
ends the loop; the checks made so far are kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.advisor import run_inputs
from harness.advisor.advice import write_advice
from harness.advisor.check_text import check_line
from harness.advisor.record import ADVICE_JSON, read_advice
from harness.bundle.finding import Finding
from harness.bundle.jsonfile import read_json_object, write_json
from harness.bundle.schema import RUN_JSON
from harness.run.outcome import MEASURED, Exit
from harness.run.serve import flag_value
from harness.verify.changes import FlagChange, NotApplicable, flag_change
from harness.verify.check import Check, judge_check, not_applicable
from harness.verify.measure import measured_metrics
from harness.verify.rerun import rerun
from harness.verify.speed import StepReference

VERIFY_DIR = "verify"


@dataclass(slots=True)
class Loop:
    folder: Path
    run: dict[str, Any]
    engine: str
    say: Any = field(default=lambda m: print(f"kvscope verify: {m}", file=sys.stderr, flush=True))
    interrupted: bool = False
    reference: StepReference | None = None  # the run's step speed, to compare a rerun's with
    _measured: dict[tuple, tuple[dict | None, str, float | None]] = field(default_factory=dict)

    def measure(self, name: str, change: FlagChange | None) -> tuple[dict | None, str, float | None]:
        """(metrics, why not, step speed relative to the run's) of the rerun with `change`
        (None: unchanged); cached per change."""
        key = change.flags if change else ()
        if key in self._measured:
            return self._measured[key]
        taken = {p.name for p in (self.folder / VERIFY_DIR).glob("*") if p.is_dir()}
        name = next(n for n in (name, *(f"{name}-{i}" for i in range(2, 100))) if n not in taken)
        out = self.folder / VERIFY_DIR / name
        what = " ".join(change.words()) if change else "unchanged"
        self.say(f"rerunning {name} ({what}) -> {out}")
        result = rerun(self.run, out, change, self.folder / VERIFY_DIR / f"{name}.log")
        if result.exit_code == Exit.INTERRUPTED:
            self.interrupted = True
        if result.exit_code in MEASURED:
            inputs = run_inputs.load(out)
            speed = self.reference.relative(inputs) if self.reference else None
            found = (measured_metrics(inputs), "", speed)
        else:
            found = (None, _failure(out, result.exit_code), None)
        self._measured[key] = found
        return found


def _failure(out: Path, code: int) -> str:
    try:
        reason = Finding.from_json(
            (read_json_object(out / RUN_JSON).get("exit") or {}).get("reason") or ""
        ).text
    except Exception:  # no run.json: the rerun did not get that far
        reason = ""
    return f"the rerun exited {code}" + (f": {reason.splitlines()[0]}" if reason else "")


def _engine(run: dict[str, Any]) -> str:
    serve = (run.get("config") or {}).get("serve")
    return serve["engine"] if serve else "bundled"


def _command_flags(run: dict[str, Any]) -> dict[str, str]:
    serve = (run.get("config") or {}).get("serve") or {}
    argv = serve.get("argv") or []
    return {f: v for f in ("-c", "-np") if (v := flag_value(argv, f)) is not None}


def change_of(verdict: dict[str, Any]) -> dict[str, Any]:
    """The verdict's change: the one its replay ran, else what it projects (a verdict that was
    not replayed still names its pool, dtype or limit)."""
    replayed = (verdict.get("replay") or {}).get("change")
    if replayed:
        return replayed
    projected, action = verdict.get("projected") or {}, verdict.get("action")
    out: dict[str, Any] = {"label": verdict.get("title")}
    if action == "quantize_kv_cache":
        out["kv_cache_dtype"] = "fp8"
    if action in ("add_memory", "quantize_kv_cache") and projected.get("pool_blocks"):
        out["num_blocks"] = projected["pool_blocks"]
    if action == "cut_context" and projected.get("max_model_len"):
        out["max_model_len"] = projected["max_model_len"]
    return out


def _check(loop: Loop, verdict: dict[str, Any], block_size: int, as_run: dict, baseline: dict) -> Check:
    change = change_of(verdict)
    flags = flag_change(verdict["action"], change, loop.engine, block_size, _command_flags(loop.run))  # type: ignore[arg-type]
    if isinstance(flags, NotApplicable):
        return not_applicable({"label": change.get("label")}, flags.reason)
    applied = {"label": change.get("label"), "engine": loop.engine, "flags": flags.words()}
    measured, why, speed = loop.measure(verdict["action"], flags)
    if measured is None:
        text = f"the server did not run with the change: {why}"
        refused = "healthy" in why
        reason = Finding("verify_engine_refused", text) if refused else Finding("verify_rerun_failed", text)
        return not_applicable(applied, reason)
    return judge_check(verdict, applied, as_run, baseline, measured, speed)


def verify(folder: Path, only: frozenset[str] | None = None) -> dict[str, Any]:
    """Run the loop on a bundle (see the module doc); returns advice.json's new content.
    `only`: the verdict actions to apply (None: all; the others keep no check).
    ValueError (NotRerunnable) when the bundle's server cannot be restarted by kvscope."""
    from harness.postprocess import advise_and_report
    from harness.report.advice import advice_markdown
    from harness.report.write import write_report

    run = read_json_object(folder / RUN_JSON)
    inputs = run_inputs.load(folder)
    if not (folder / ADVICE_JSON).exists():
        advise_and_report(folder, inputs)
    advice = read_json_object(folder / ADVICE_JSON)
    loop = Loop(folder, run, _engine(run), reference=StepReference.of(inputs))
    chosen = [v for v in advice["verdicts"] if only is None or v["action"] in only]
    loop.say(f"{len(chosen)} verdict(s) to apply to {loop.engine}; each rerun repeats the run")
    as_run = measured_metrics(inputs)
    baseline, why, _ = loop.measure("baseline", None)
    block_size = inputs.deployment.engine.block_size
    for v in chosen:
        if loop.interrupted:
            break
        if baseline is None:
            reason = Finding("verify_no_baseline", f"the unchanged configuration could not be rerun: {why}")
            check = not_applicable({}, reason)
        else:
            check = _check(loop, v, block_size, as_run, baseline)
        v["check"] = check.to_json()
        loop.say(check_line(v["action"], v["check"]))
    if loop.interrupted:
        note = Finding("verify_interrupted", "verify: interrupted; verdicts without a check were not rerun")
        advice.setdefault("notes", []).append(note.to_dict())
    write_json(folder / ADVICE_JSON, advice)
    made = read_advice(folder)  # the checks in the Advice section's Markdown and the report
    if made is not None:
        advice = write_advice(made, folder, advice_markdown(made))
        write_report(folder, advice=made)
    return advice
