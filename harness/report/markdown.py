"""Render a report Document as Markdown (report.md).

Plain-text strings are escaped for Markdown and for HTML, because most Markdown viewers pass
raw HTML through: a model called `<script>` must show as text, not run. Escaping `<` alone
is enough to stop every tag (and keeps `->` and `&` readable in the raw file).
Table cells also escape `|` and flatten newlines, which would otherwise break the table.
"""

from __future__ import annotations

import re

from harness.report.document import AdvisorMarkdown, Bullets, Document, Image, Para, Table

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#])")


def text(s: str) -> str:
    """Plain text made inert in Markdown (no emphasis, links, headings or HTML)."""
    return _MD_SPECIAL.sub(r"\\\1", no_tags(str(s)))


def cell(s: str) -> str:
    return text(s).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def no_tags(s: str) -> str:
    return s.replace("<", "&lt;")


def advisor(md: str) -> str:
    """The advisor's Markdown, with raw HTML neutralised (its text may quote server strings)."""
    return no_tags(md)


def render_markdown(doc: Document) -> str:
    out = [f"# {text(doc.title)}", ""]
    out += [text(line) + "  " for line in doc.subtitle]
    for section in doc.sections:
        out += ["", f"## {text(section.title)}", ""]
        for block in section.blocks:
            if isinstance(block, Para):
                out += [f"**{text(block.text)}**" if block.strong else text(block.text), ""]
            elif isinstance(block, Bullets):
                out += [f"- {text(item)}" for item in block.items] + [""]
            elif isinstance(block, Table):
                if block.caption:
                    out += [f"*{text(block.caption)}*", ""]
                out += [
                    "| " + " | ".join(cell(h) for h in block.headers) + " |",
                    "|" + "|".join("---" for _ in block.headers) + "|",
                ]
                out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in block.rows] + [""]
            elif isinstance(block, Image):
                out += [f"![{cell(block.alt)}]({block.file})", ""]
            elif isinstance(block, AdvisorMarkdown):
                out += [advisor(block.text).rstrip(), ""]
    return "\n".join(out).rstrip() + "\n"
