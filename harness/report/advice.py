"""The "## Advice" section: the advisor's Markdown when given, else advice.json, else a note.

advice.json's layout belongs to the advisor; this reads it loosely: a `markdown` string wins;
otherwise a verdict/summary line and lists of findings/recommendations (strings, or objects
with a title/text/message and optional evidence) become paragraphs and bullets. Anything
else is shown as its JSON, so nothing the advisor wrote is silently dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.report.document import AdvisorMarkdown, Block, Bullets, Para

_TEXT_KEYS = ("verdict", "summary", "headline", "diagnosis")
_LIST_KEYS = ("findings", "recommendations", "actions", "advice", "evidence", "notes")
_ITEM_KEYS = ("title", "text", "message", "action", "recommendation", "summary", "rule")


def _item(x: Any) -> str:
    if isinstance(x, dict):
        head = next((str(x[k]) for k in _ITEM_KEYS if x.get(k)), None)
        rest = {k: v for k, v in x.items() if k not in _ITEM_KEYS}
        tail = "; ".join(f"{k}: {v}" for k, v in rest.items() if not isinstance(v, (dict, list)))
        return " — ".join(p for p in (head, tail) if p) or json.dumps(x, default=str)
    return str(x)


def without_heading(md: str) -> str:
    """The advisor may render its section with its own "## Advice" heading; the report has one."""
    return re.sub(r"\A\s*#{1,2}\s*Advice\s*\n", "", md, flags=re.IGNORECASE)


def advice_blocks(advice_markdown: str | None, advice_json: dict[str, Any] | None) -> list[Block]:
    if advice_markdown and advice_markdown.strip():
        return [AdvisorMarkdown(without_heading(advice_markdown))]
    if isinstance(advice_json, dict) and advice_json:
        if isinstance(advice_json.get("markdown"), str) and advice_json["markdown"].strip():
            return [AdvisorMarkdown(without_heading(advice_json["markdown"]))]
        blocks: list[Block] = []
        for key in _TEXT_KEYS:
            if isinstance(advice_json.get(key), str):
                blocks.append(Para(advice_json[key], strong=not blocks))
        for key in _LIST_KEYS:
            items = advice_json.get(key)
            if isinstance(items, list) and items:
                blocks += [Para(key.capitalize() + ":"), Bullets([_item(i) for i in items])]
        if blocks:
            return blocks
        return [Para("advice.json:"), Para(json.dumps(advice_json, indent=1, default=str))]
    return [Para("No advice yet: run `kvscope advise` on this folder to fill this section.")]
