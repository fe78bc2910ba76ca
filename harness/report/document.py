"""A report as data: sections of paragraphs, bullet lists, tables, images and advisor markdown.

Both renderers (markdown.py, html.py) walk the same Document, so report.md and report.html
cannot disagree. Invariant: every string in Para/Bullets/Table is *plain text*, never markup
(model names, targets, error messages come from the server and may contain anything); the
renderers escape it. Only `AdvisorMarkdown` carries markup, and html.py converts it with an
escape-first converter, so it cannot inject HTML either.
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
class AdvisorMarkdown:
    text: str


Block = Para | Bullets | Table | Image | AdvisorMarkdown


@dataclass(slots=True)
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass(slots=True)
class Document:
    title: str
    subtitle: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def section(self, title: str) -> Section:
        s = Section(title)
        self.sections.append(s)
        return s
