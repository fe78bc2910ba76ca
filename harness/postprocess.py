"""What happens to a bundle once its data is written: the advice, then the report.

`kvscope run` calls `advise_and_report` at the end; `kvscope advise` calls it too. The
advice comes first because the report puts it at the top.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def advise_and_report(directory: str | Path, inputs=None, replay: bool = True) -> dict[str, Any]:
    """Write advice.json, report.md and report.html into `directory`; returns advice.json's
    content. `inputs` (run_inputs.RunInputs) overrides what is read from the folder."""
    from harness.advisor import run_inputs
    from harness.advisor.advice import advise, write_advice
    from harness.report.advice import advice_markdown
    from harness.report.write import write_report

    advice = advise(inputs or run_inputs.load(directory), replay=replay)
    data = write_advice(advice, directory, advice_markdown(advice))
    write_report(directory, advice=advice)
    return data
