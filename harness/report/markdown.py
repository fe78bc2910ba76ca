"""Render a report Document as Markdown (report.md, and advice.json's `markdown`).

Plain-text strings are escaped for Markdown and for HTML, because most Markdown viewers pass
raw HTML through: a model called `<script>` must show as text, not run. Escaping `<` alone
is enough to stop every tag (and keeps `->` and `&` readable in the raw file). An underscore
inside a word (`max_num_seqs`) starts no emphasis in Markdown, so it stays as it is.
Table cells also escape `|` and flatten newlines, which would otherwise break the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import singledispatch

from harness.report.document import Block, Bullets, Document, Heading, Image, Para, Section, Table

_MD_SPECIAL = re.compile(r"[\\`*\[\]#]|(?<!\w)_|_(?!\w)")


def text(s: str) -> str:
    """Plain text made inert in Markdown (no emphasis, links, headings or HTML)."""
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), no_tags(str(s)))


def cell(s: str) -> str:
    return text(s).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def no_tags(s: str) -> str:
    return s.replace("<", "&lt;")


@singledispatch
def block_lines(block: Block) -> list[str]:
    """One block's lines (one function per block type, registered below)."""
    raise TypeError(f"no Markdown for {type(block).__name__}")


@block_lines.register
def _(b: Para) -> list[str]:
    return [f"**{text(b.text)}**" if b.strong else text(b.text)]


@block_lines.register
def _(b: Bullets) -> list[str]:
    return [f"- {text(item)}" for item in b.items]


@block_lines.register
def _(b: Table) -> list[str]:
    out = [f"*{text(b.caption)}*", ""] if b.caption else []
    out += [
        "| " + " | ".join(cell(h) for h in b.headers) + " |",
        "|" + "|".join("---" for _ in b.headers) + "|",
    ]
    return out + ["| " + " | ".join(cell(c) for c in row) + " |" for row in b.rows]


@block_lines.register
def _(b: Image) -> list[str]:
    return [f"![{cell(b.alt)}]({b.file})"]


@block_lines.register
def _(b: Heading) -> list[str]:
    return [f"### {text(b.text)}"]


def blocks_markdown(blocks: Iterable[Block]) -> list[str]:
    """Lines of the blocks, each followed by a blank line."""
    out: list[str] = []
    for block in blocks:
        out += block_lines(block) + [""]
    return out


def section_markdown(section: Section) -> str:
    return "\n".join([f"## {text(section.title)}", "", *blocks_markdown(section.blocks)]).rstrip() + "\n"


def render_markdown(doc: Document) -> str:
    out = [f"# {text(doc.title)}", ""]
    out += [text(line) + "  " for line in doc.subtitle]
    for section in doc.sections:
        out += ["", section_markdown(section)]
    return "\n".join(out).rstrip() + "\n"
