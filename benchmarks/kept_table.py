"""A long benchmark's table kept in benchmarks/NAME.md (`run_all` includes it as it was last
written, with the command, the machine and the date it was measured on)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.machine_info import machine

ROOT = Path(__file__).resolve().parents[1]


def emit(body: str, name: str, command: str, write: bool) -> None:
    """Print `body`; with `write`, also keep it in benchmarks/NAME.md under its provenance."""
    print(body)
    if write:
        head = f"Command: `{command}`. Machine: {machine().line()}.\n\n"
        (ROOT / "benchmarks" / f"{name}.md").write_text(head + body.strip() + "\n", encoding="utf-8")
