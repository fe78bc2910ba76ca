"""The advisor: sizing arithmetic, workload evidence and what-if replays (import-light)."""
