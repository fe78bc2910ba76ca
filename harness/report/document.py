"""A report as data: sections of paragraphs, bullet lists, tables, images and sub-headings.

Both renderers (markdown.py, html.py) walk the same Document, so report.md and report.html
cannot disagree; the advice is built into these blocks too (advice.py), never as Markdown.
Invariant: every string in a block is *plain text*, never markup (model names, targets,
error messages come from the server and may contain anything); the renderers escape it.
A new kind of block is one dataclass here and one function in each renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    strong: bool = False


@dataclass(frozen=True, slots=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True, slots=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass(frozen=True, slots=True)
class Image:
    file: str  # relative to the report folder, e.g. "plots/latency_cdf.png"
    alt: str


@dataclass(frozen=True, slots=True)
class Heading:
    """A heading inside a section (one level below the section's title), e.g. one verdict."""

    text: str


Block = Para | Bullets | Table | Image | Heading


@dataclass(slots=True)
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass(slots=True)
class Document:
    title: str
    subtitle: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
