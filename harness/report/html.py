"""Render a report Document as one self-contained HTML file (report.html).

Self-contained: images are embedded as base64 PNG data URIs, the style sheet is inline, and
there is no script and no external URL at all, so the file opens offline, can be mailed, and
a hostile string cannot make it fetch anything. Every string goes through `html.escape`:
blocks hold plain text only (document.py), so there is no markup to convert.
"""

from __future__ import annotations

import base64
import html
from functools import singledispatch
from pathlib import Path

from harness.report.document import Block, Bullets, Document, Heading, Image, Para, Table

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1.05em;margin:1.2em 0 .3em}
.sub{color:#555;margin:0}table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}img{max-width:100%;height:auto;border:1px solid #eee}
.strong{font-weight:600}.caption{color:#555;font-style:italic}
"""


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


@singledispatch
def block_html(block: Block, base: Path) -> str:
    """One block's HTML (one function per block type, registered below); `base` is the
    folder image paths are relative to."""
    raise TypeError(f"no HTML for {type(block).__name__}")


@block_html.register
def _(b: Para, base: Path) -> str:
    return f'<p class="strong">{esc(b.text)}</p>' if b.strong else f"<p>{esc(b.text)}</p>"


@block_html.register
def _(b: Bullets, base: Path) -> str:
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in b.items) + "</ul>"


@block_html.register
def _(b: Table, base: Path) -> str:
    rows = ["<table>"]
    if b.caption:
        rows.append(f'<caption class="caption">{esc(b.caption)}</caption>')
    rows.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in b.headers) + "</tr>")
    rows += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in b.rows]
    return "\n".join(rows + ["</table>"])


@block_html.register
def _(b: Image, base: Path) -> str:
    uri = "data:image/png;base64," + base64.b64encode((base / b.file).read_bytes()).decode("ascii")
    return f'<figure><img src="{uri}" alt="{esc(b.alt)}"></figure>'


@block_html.register
def _(b: Heading, base: Path) -> str:
    return f"<h3>{esc(b.text)}</h3>"


def render_html(doc: Document, base: Path) -> str:
    """`base` is the folder image paths are relative to (the report folder)."""
    body = [f"<h1>{esc(doc.title)}</h1>"] + [f'<p class="sub">{esc(line)}</p>' for line in doc.subtitle]
    for section in doc.sections:
        body.append(f"<h2>{esc(section.title)}</h2>")
        body += [block_html(block, base) for block in section.blocks]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{esc(doc.title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
