"""The report's server-timing sections: the server-side split (queue / prefill / decode) by
latency band, where each server figure came from, and what the span receiver counted.
Every server string (attribute names, span formats) reaches HTML through the document's
escaping, never as markup."""

from __future__ import annotations

from typing import Any

from harness.formatting import ms_cell, pct
from harness.report.document import Bullets, Para, Section, Table
from harness.report.run_report import RunReport

SPLIT_HEADERS = ["client E2E band", "requests", "E2E p50 ms", "queue p50 ms", "prefill p50 ms",
                 "decode p50 ms", "queue share of server E2E"]  # fmt: skip
RECEIVER_REASONS = (
    ("spans_duplicate", "duplicate (sent again)"),
    ("spans_late", "late (after the grace period)"),
    ("spans_other", "not request spans"),
    ("spans_over_cap", "over the span cap"),
    ("bodies_malformed", "malformed bodies"),
    ("bodies_oversized", "oversized bodies"),
    ("bodies_gzip_bomb", "gzip bombs"),
    ("bodies_unsupported_media", "unsupported media type"),
    ("bodies_busy", "refused while busy"),
)


def source_sentence(split: dict[str, Any]) -> str:
    parts = []
    for source, count in split.get("sources", {}).items():
        what = split.get("source_text", {}).get(source) or "no server timing"
        parts.append(f"{count} from {what}" if source != "none" else f"{count} without server timing")
    return "Server figures per request: " + ("; ".join(parts) if parts else "none") + "."


def server_split_section(r: RunReport) -> Section | None:
    s = r.summary
    split = s.get("server_split") or {}
    spans = s.get("spans")
    if not split.get("rows") and not spans:
        return None
    sec = Section("Server-side split by latency band")
    if split.get("rows"):
        sec.blocks.append(
            Table(
                SPLIT_HEADERS,
                [
                    [
                        row["band"],
                        str(row["requests"]),
                        ms_cell(row["e2e_p50_s"]),
                        ms_cell(row["queue_p50_s"]),
                        ms_cell(row["prefill_p50_s"]),
                        ms_cell(row["decode_p50_s"]),
                        pct(row["queue_share_p50"]),
                    ]
                    for row in split["rows"]
                ],
                "successful requests banded by client E2E percentile; medians of the server's own figures",
            )
        )
    sec.blocks.append(Para(source_sentence(split)))
    if spans:
        sec.blocks.append(Bullets(_span_items(spans)))
    return sec


def _span_items(spans: dict[str, Any]) -> list[str]:
    join, receiver = spans.get("join") or {}, spans.get("receiver") or {}
    refused = [f"{receiver[k]} {label}" for k, label in RECEIVER_REASONS if receiver.get(k)]
    return [
        f"{join.get('joined', 0)} of {join.get('ok_traced', 0)} successful traced requests joined to a "
        f"span by trace id; {join.get('missing', 0)} without a span, "
        f"{join.get('unknown_trace', 0)} spans of unknown trace ids, "
        f"{join.get('extra_same_trace', 0)} extra spans of a joined trace",
        "receiver: " + (", ".join(refused) if refused else "nothing refused or dropped"),
    ]
