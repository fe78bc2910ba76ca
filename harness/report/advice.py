"""The "## Advice" section: the advisor's Markdown when given, else the folder's advice.json
(read as the advisor's `Advice` and rendered by the advisor), else a note saying how to get it."""

from __future__ import annotations

import re

from harness.advisor.markdown import render
from harness.advisor.record import Advice
from harness.report.document import AdvisorMarkdown, Block, Para


def without_heading(md: str) -> str:
    """The advisor may render its section with its own "## Advice" heading; the report has one."""
    return re.sub(r"\A\s*#{1,2}\s*Advice\s*\n", "", md, flags=re.IGNORECASE)


def advice_blocks(advice_markdown: str | None, advice: Advice | None) -> list[Block]:
    if advice_markdown and advice_markdown.strip():
        return [AdvisorMarkdown(without_heading(advice_markdown))]
    if advice is not None:
        return [AdvisorMarkdown(without_heading(render(advice)))]
    return [Para("No advice yet: run `kvscope advise` on this folder to fill this section.")]
