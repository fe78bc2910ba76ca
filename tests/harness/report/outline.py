"""The outline of a rendered report, to compare report.md with report.html: its headings
(section titles and the sub-headings inside them) and its tables (header and cells), each
as plain text, in document order."""

from __future__ import annotations

import re
from html.parser import HTMLParser

Item = tuple  # ("h2", title) | ("h3", title) | ("table", headers, rows)
_ESCAPED = re.compile(r"\\([\\`*_\[\]#|])")


def _plain_md(s: str) -> str:
    return _ESCAPED.sub(r"\1", s.strip()).replace("&lt;", "<")


def _cells(line: str) -> list[str]:
    return [_plain_md(c) for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def markdown_outline(md: str) -> list[Item]:
    out: list[Item] = []
    table: list[list[str]] = []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(-+\|)+", line):
                table.append(_cells(line))
            continue
        if table:
            out.append(("table", table[0], table[1:]))
            table = []
        if m := re.match(r"(#{2,3}) (.*)", line):
            out.append((f"h{len(m.group(1))}", _plain_md(m.group(2))))
    return out


class _Outline(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[Item] = []
        self.text: list[str] | None = None
        self.rows: list[list[str]] | None = None

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in ("h2", "h3", "th", "td"):
            self.text = []
        elif tag == "table":
            self.rows = []
        elif tag == "tr" and self.rows is not None:
            self.rows.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h2", "h3") and self.text is not None:
            self.items.append((tag, "".join(self.text).strip()))
        elif tag in ("th", "td") and self.rows and self.text is not None:
            self.rows[-1].append("".join(self.text).strip())
        elif tag == "table" and self.rows:
            self.items.append(("table", self.rows[0], self.rows[1:]))
            self.rows = None
        if tag in ("h2", "h3", "th", "td"):
            self.text = None

    def handle_data(self, data: str) -> None:
        if self.text is not None:
            self.text.append(data)


def html_outline(page: str) -> list[Item]:
    parser = _Outline()  # entities are decoded as the text is read (convert_charrefs)
    parser.feed(page)
    return parser.items


def titles(outline: list[Item], level: str = "h2") -> list[str]:
    return [item[1] for item in outline if item[0] == level]
