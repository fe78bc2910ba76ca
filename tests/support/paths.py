"""Where the repository's files are, for tests that run its scripts or read its shipped files."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
