"""Render a report Document as one self-contained HTML file (report.html).

Self-contained: images are embedded as base64 PNG data URIs, the style sheet is inline, and
there is no script and no external URL at all, so the file opens offline, can be mailed, and
a hostile string cannot make it fetch anything. Every plain-text string goes through
`html.escape`; the advisor's Markdown goes through `markdown_to_html`, which escapes first
and only then adds the few tags it understands.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from harness.report.document import AdvisorMarkdown, Bullets, Document, Image, Para, Table

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.sub{color:#555;margin:0}table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}img{max-width:100%;height:auto;border:1px solid #eee}
.strong{font-weight:600}.caption{color:#555;font-style:italic}code{background:#f4f4f4;padding:0 .2em}
"""

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _inline(escaped: str) -> str:
    return _CODE.sub(r"<code>\1</code>", _BOLD.sub(r"<strong>\1</strong>", escaped))


def markdown_to_html(md: str) -> str:
    """A small, safe Markdown subset: headings, paragraphs, bullet and numbered lists with one
    level of nesting (an indented item belongs to the item above it), pipe tables (first row
    the header, the `|---|` row skipped; inside a list item they stay in that item), **bold**
    and `code`. The text is escaped before any tag is added."""
    out: list[str] = []
    para: list[str] = []
    lists: list[str] = []  # open list tags, outermost first; each open list has an open <li>
    table: list[list[str]] = []

    def flush_table() -> None:
        if table:
            head, *body = table
            out.append("<table>")
            out.append("<tr>" + "".join(f"<th>{_inline(esc(c))}</th>" for c in head) + "</tr>")
            out.extend("<tr>" + "".join(f"<td>{_inline(esc(c))}</td>" for c in row) + "</tr>" for row in body)
            out.append("</table>")
            table.clear()

    def flush_para() -> None:
        if para:
            out.append("<p>" + _inline(esc(" ".join(para))) + "</p>")
            para.clear()

    def close_lists(depth: int = 0) -> None:
        while len(lists) > depth:
            out.append(f"</li></{lists.pop()}>")

    for raw in md.splitlines():
        line = raw.strip()
        indent = len(raw) - len(raw.lstrip(" "))
        heading = re.match(r"(#{1,6})\s+(.*)", line)
        item = re.match(r"(?:([-*])|\d+[.)])\s+(.*)", line)
        if line.startswith("|"):
            flush_para()
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                table.append(cells)
            continue
        flush_table()
        if not line:
            flush_para()
            if not (lists and indent >= 2):
                close_lists()
        elif heading:
            flush_para()
            close_lists()
            level = min(6, len(heading.group(1)) + 2)  # inside a section: h3 and below
            out.append(f"<h{level}>{_inline(esc(heading.group(2)))}</h{level}>")
        elif item:
            flush_para()
            tag = "ul" if item.group(1) else "ol"
            depth = 2 if indent >= 2 and lists else 1
            close_lists(depth)
            if len(lists) == depth and lists[-1] != tag:
                close_lists(depth - 1)
            if len(lists) == depth:
                out.append("</li><li>" + _inline(esc(item.group(2))))
            else:
                out.append(f"<{tag}><li>" + _inline(esc(item.group(2))))
                lists.append(tag)
        elif lists and indent >= 2:
            out.append("<br>" + _inline(esc(line)))  # continuation of the open item
        else:
            close_lists()
            para.append(line)
    flush_table()
    flush_para()
    close_lists()
    return "\n".join(out)


def _image(block: Image, base: Path) -> str:
    data = (base / block.file).read_bytes()
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return f'<figure><img src="{uri}" alt="{esc(block.alt)}"></figure>'


def _table(block: Table) -> str:
    rows = ["<table>"]
    if block.caption:
        rows.append(f'<caption class="caption">{esc(block.caption)}</caption>')
    rows.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in block.headers) + "</tr>")
    rows += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in block.rows]
    return "\n".join(rows + ["</table>"])


def render_html(doc: Document, base: Path) -> str:
    """`base` is the folder image paths are relative to (the report folder)."""
    body = [f"<h1>{esc(doc.title)}</h1>"] + [f'<p class="sub">{esc(line)}</p>' for line in doc.subtitle]
    for section in doc.sections:
        body.append(f"<h2>{esc(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Para):
                body.append(
                    f'<p class="strong">{esc(block.text)}</p>'
                    if block.strong
                    else f"<p>{esc(block.text)}</p>"
                )
            elif isinstance(block, Bullets):
                body.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in block.items) + "</ul>")
            elif isinstance(block, Table):
                body.append(_table(block))
            elif isinstance(block, Image):
                body.append(_image(block, base))
            elif isinstance(block, AdvisorMarkdown):
                body.append(markdown_to_html(block.text))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{esc(doc.title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
