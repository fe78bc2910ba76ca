"""A probe's statements about what it measured or could not: each a stable snake_case `code`
(for machines, stable across releases) beside its text (for people).

Findings are `harness.bundle.finding.Finding`s, their codes registered in
`harness.bundle.finding_codes` (under "probe.json findings") like every other finding; the
constants here name them for the comparisons the probe makes on them."""

from __future__ import annotations

# What could not be measured (the figure it concerns is null in probe.json).
NO_KV_USAGE = "no_kv_usage_metric"  # the server exposes no KV occupancy at all
TARGET_UNREACHABLE = "target_unreachable"
REQUEST_FAILED = "probe_request_failed"  # a ladder request got no answer or an error
PROBE_PREEMPTED = "probe_preempted"  # a lone request was preempted: its occupancy is not its cost
OTHER_LOAD = "other_load"  # another client's requests ran while a ladder request was measured
USAGE_NEVER_ROSE = "usage_never_rose"  # a request's occupancy was never seen above the idle level
IDLE_USAGE_RETAINED = "idle_usage_retained"  # usage stays up after requests end (cached blocks count)
TOO_FEW_POINTS = "too_few_points"  # fewer than two usable ladder points: no fit
NO_GROWTH = "fixed_reservation"  # occupancy does not grow with tokens (a per-request reservation)
POOL_BLOCKS_UNMEASURED = "pool_blocks_unmeasured"  # usage is not a whole number of blocks over a pool
POOL_BLOCKS_STATED = "pool_blocks_from_statement"  # the pool's block count is the server's statement
NOT_WHOLE_BLOCKS = "not_whole_blocks"  # no whole block size explains every point exactly
PEAK_READ_LAG = "peak_read_lag"  # a one-token pool: a minority of peaks read a token or two off
NO_LENGTHS = "no_lengths"  # no request lengths to tabulate (no --lengths, no bundle)
BUNDLE_NO_KV_SAMPLES = "bundle_no_kv_samples"
BUNDLE_PREFIX_SHARING = "bundle_prefix_sharing"  # shared prefix blocks make the run's fit low

# What the comparison with the server's statement found.
NULL_BLOCK = "null_block"  # measured = stated - 1 block: the null block pads block tables
CAPACITY_DIFFERS = "capacity_differs_from_statement"
CAPACITY_MATCHES = "capacity_matches_statement"
NO_STATEMENT = "no_stated_capacity"
