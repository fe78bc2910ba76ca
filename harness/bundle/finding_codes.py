"""Every finding code kvscope writes, where it appears and what it means: the one registry.

Adding a finding is adding one row here (and emitting `Finding("its_code", text)`); the
README's "Finding codes" table is this registry (`python -m harness.bundle.finding_codes`
prints it, and a test holds the README to it). Codes are stable: a reader (a CI job, a
notebook) may branch on them; the sentences beside them may be reworded any time.
"""

from __future__ import annotations

from dataclasses import dataclass

SELF_CHECK_REASON = "summary.json selfcheck.reasons"
SELF_CHECK_NOTE = "summary.json selfcheck.notes"
ADVICE_NOTE = "advice.json notes"
STATUS_REASON = "advice.json verdicts[].status_reason"
REPLAY_WHY = "advice.json verdicts[].replay.why"
REPLAY_IMPLAUSIBLE = "advice.json verdicts[].replay.implausible"
FIDELITY = "advice.json fidelity.reason"
RUN_NOTE = "run.json notes"
RUN_EXIT = "run.json exit.reason"
PROBE = "probe.json findings"
KV_EVENTS = ("run.json kv_events.notes", "run.json notes")
CHECK_REASON = "advice.json verdicts[].check.reason"
CHECK_MISS = "advice.json verdicts[].check.misses"
UNCODED = "uncoded"


@dataclass(frozen=True, slots=True)
class Code:
    where: tuple[str, ...]
    meaning: str


ANYWHERE = "anywhere a finding goes"


def _codes(sections: dict[str | tuple[str, ...], dict[str, str]]) -> dict[str, Code]:
    out: dict[str, Code] = {}
    for where, rows in sections.items():
        for code, meaning in rows.items():
            if code in out:
                raise ValueError(f"finding code {code!r} registered twice")
            out[code] = Code((where,) if isinstance(where, str) else where, meaning)
    return out


# where it appears -> {code: what it means}
_SECTIONS: dict[str | tuple[str, ...], dict[str, str]] = {
    SELF_CHECK_REASON: {
        "client_lag_typical": "the client read the typical request over 50 ms late: it was saturated",
        "client_lag_moved_p99": "client lag moved a p99 (`subject`: TTFT or E2E) by over max(50 ms, 10%)",
        "schedule_lag": "open-loop requests left over 50 ms late (p99): less load was offered than asked",
        "load_generator_cpu": "the load generator warned about its CPU",
        "client_errors": "requests failed inside the client (error class client_error)",
        "no_success": "no request succeeded: there is nothing to measure",
        "bunched_by_client": "over a fifth of the inter-token gaps are under 1 ms: the client read late",
    },
    SELF_CHECK_NOTE: {
        "lag_from_histogram": "client delay from the server's TTFT histogram: a lower bound",
        "server_ttft_too_few": "too few requests with a server TTFT to check the client delay",
        "no_server_ttft": "no server TTFT (per request or histogram): the client delay is not checked",
        "queue_time_excluded": "server timings leave out queue time; none waited: the delay is the client's",
        "queue_time_unknown": "server timings leave out queue time and requests waited: lag not checked",
        "bunched_by_engine": "many gaps under 1 ms, and the engine produces tokens that fast",
        "bunched_by_server": "many gaps under 1 ms left the server together; the client read in time",
        "bunched_unknown": "many gaps under 1 ms, cause unknown (no server timing to compare with)",
        "unexpected_cache_hits": "a workload that shares nothing found its prompts in the prefix cache",
    },
    (ADVICE_NOTE, RUN_NOTE): {
        "deployment_replaced": "a stated --deployment fact replaced what the run recorded",
    },
    ADVICE_NOTE: {
        "run_incomplete": "the run did not complete; the advice covers what was measured",
        "no_engine_samples": "server.parquet has no samples from the engine: no diagnosis",
        "replays_need_facts": "no replay: the simulator would guess facts nobody stated (see missing_facts)",
        "no_replay": "the run's replay could not be set up (the text says why)",
        "demand_replay_failed": "the replay measuring the run's KV demand failed",
        "demand_capped": "the demand replay's pool was capped below what the trace could need",
        "demand_from_arithmetic": "KV demand is the upper bound peak requests x p99 length, not a replay's",
        "replays_not_trusted": "the replay of the run as it was does not resemble it: none verifies",
        "probe_unreadable": "the bundle's probe.json is unreadable: verdicts stay in arithmetic terms",
        "no_replays_needed": "no KV pressure, no queueing and no proposal to verify: nothing replayed",
        "replay_failed": "a verdict's replay failed (`subject`: its action)",
        "alternative_replay_failed": "the replay of a verdict's alternative failed (`subject`: its action)",
        "replay_excludes_failed": "failed requests (no token counts) are not in the replays",
        "replay_carries_less_load": "the server finished more requests than the bundle records",
        "rule_lacks_facts": "a verdict was not issued: facts it needs are unknown (`subject`: its action)",
        "no_kv_pressure": "no KV pressure: the KV verdicts do not apply",
        "demand_unknown": "add_memory not sized: no replay and no running/waiting samples for the demand",
        "demand_within_pool": "add_memory not advised: the replayed demand fits the run's pool",
        "context_limit_close": "cut_context not advised: the limit is not twice what a cut could go to",
        "sessions_near_context_limit": "sessions reached 90% of max_model_len: later turns will not fit",
        "context_never_exceeded": "cut_context not advised: every request fit and a paged pool does not grow",
        "no_prompt_fingerprints": "make_prefix_identical not judged: no prompt fingerprints in the bundle",
        "prefix_caching_off": "identical prefixes the prefix cache did not hit: prefix caching is off",
        "prefix_blocks_evicted": "identical prefixes the prefix cache did not hit: evicted before reuse",
        "prefix_cache_missed": "identical prefixes the prefix cache did not hit: caching off, or evicted",
        "curve_gain_small": "add_memory (prefix reuse) not advised: the miss-ratio curve gains too little",
        "curve_upper_bound": "add_memory (prefix reuse) under KV pressure: its hit ratio is an upper bound",
        "prefixes_not_shared": "route_by_prefix not advised: few cached blocks are on several replicas",
        "no_prefix_groups": "route_by_prefix not replayed: the prompts carry no shared-prefix groups",
        "no_prefix_counters": "KV events without prefix-cache counters for their instance: no curve",
        "verify_interrupted": "--verify was interrupted: verdicts without a check were not rerun",
    },
    CHECK_REASON: {
        "verify_confirmed": "the change, rerun, moved the deciding metric as predicted, past the noise",
        "verify_refuted": "applied and rerun, the change did not move the deciding metric past the noise",
        "verify_not_measured": "the deciding metric was not measured in a rerun",
        "verify_engine_refused": "the server did not come up with the change (the text has its words)",
        "verify_rerun_failed": "the rerun with the change failed for another reason",
        "verify_no_baseline": "the unchanged configuration could not be rerun: no noise, no check",
        "verify_other_hardware": "the change moves to another GPU, tensor parallelism or replicas",
        "verify_not_a_server_change": "the change is to the prompts or a router, not the server's flags",
        "verify_no_gpu": "a GPU memory fraction, on a server that sizes its pool otherwise",
        "verify_unknown_engine": "kvscope does not know this server's flags",
        "verify_flag_unknown": "a flag the change needs is not in the server's command",
        "verify_nothing_to_apply": "the verdict changes nothing a server flag sets",
    },
    CHECK_MISS: {
        "verify_miss_noise": "a miss within the run-to-run noise (`subject`: the metric)",
        "verify_miss_curve_pressure": "a hit ratio over the measured: the curve's run was under KV pressure",
        "verify_miss_speed": "a miss: the rerun's server stepped at another speed",
        "verify_miss_change_speed": "a miss: the change's KV dtype slowed the steps",
        "verify_miss_model": "a miss, not noise nor speed: the replay's model",
    },
    REPLAY_WHY: {
        "fewer_preemptions": "the change preempts less",
        "lower_ttft": "the change lowers TTFT p99 by at least 5%",
        "completes_fewer": "the change completes fewer requests or rejects more",
        "mixed_gain": "a gain in one of preemptions, TTFT p99 and throughput, a loss in another",
        "no_gain": "no measurable gain",
        "more_kv_changes_nothing": "kv_not_bottleneck confirmed: more KV memory changes nothing",
        "more_kv_helps": "kv_not_bottleneck refuted: more KV memory helps after all",
        "hit_ratio_replayed": "the prefix hit ratio the replay with more blocks measured",
        "routed_hit_ratio": "the hit ratio of replicas routed by prefix against round-robin",
        "no_prefix_queries": "the replay measured no prefix-cache queries",
    },
    (STATUS_REASON, REPLAY_IMPLAUSIBLE): {
        "replay_implausible": "the replay of the run as it was is 10x off its TTFT p50",
        "replay_hit_ratio_off": "hit-ratio claim: the unchanged replay is 5+ points off the run's hit ratio",
    },
    FIDELITY: {
        "replay_within_tolerance": "the unchanged configuration's replay is within 25% of the run",
    },
    (FIDELITY, STATUS_REASON): {
        "replay_off_run": "the unchanged configuration's replay is over 25% off the run",
    },
    RUN_EXIT: {
        "completed": "the run completed with its error rate within --max-error-rate",
        "run_failed": "the run could not go on (exit.status says how: failed, config_error, ...)",
        "bundle_not_written": "the bundle could not be written; the raw files are kept",
        "interrupted": "interrupted: the bundle holds what was measured until then",
        "target_lost": "the target stopped answering during the run",
        "no_request_sent": "no request was sent",
        "error_rate_over_limit": "more requests failed than --max-error-rate allows (or none succeeded)",
        "unreliable_measurement": "--fail-on-unreliable and the self-check found the run unreliable",
    },
    RUN_NOTE: {
        "exporter_down": "the exporter did not come up: server.parquet has no samples",
        "workers_lost": "the local Locust workers exited but the master did not",
        "locust_killed_after_abort": "Locust was killed some seconds after the second Ctrl-C",
        "locust_killed_late": "Locust was killed: it did not stop in time",
        "stopped_at_once": "every child was stopped at once after a second Ctrl-C",
        "otlp_receiver_exited": "the OTLP span receiver exited during the run",
        "spans_missing": "successful requests had no server span within --otlp-grace",
    },
    ANYWHERE: {
        "uncoded": "read from a bundle written before findings had codes",
    },
    PROBE: {
        "no_kv_usage_metric": "the server exposes no KV occupancy: nothing to measure",
        "target_unreachable": "the probe's target did not answer",
        "probe_request_failed": "a ladder request got no answer or an error",
        "probe_preempted": "a lone ladder request was preempted: its occupancy is not its cost",
        "other_load": "another client's requests ran while a ladder request was measured",
        "usage_never_rose": "a request's occupancy was never seen above the idle level",
        "idle_usage_retained": "KV usage stays up after requests end (the metric counts cached blocks)",
        "too_few_points": "fewer than two usable ladder points: no fit",
        "fixed_reservation": "occupancy does not grow with tokens: a fixed reservation per request",
        "pool_blocks_unmeasured": "usage is no whole number of blocks over a pool: usable blocks unmeasured",
        "pool_blocks_from_statement": "the pool's usable block count is the server's statement",
        "not_whole_blocks": "no whole block size explains every ladder point exactly",
        "peak_read_lag": "a pool counted in tokens: some peaks were read a token or two off (one-step peaks)",
        "no_lengths": "no request lengths to tabulate (no --lengths, no bundle)",
        "bundle_no_kv_samples": "the run recorded no KV usage samples: nothing to fit",
        "bundle_prefix_sharing": "the run's requests shared prefix blocks, which makes its fit low",
        "null_block": "measured capacity = stated less one block: the null block pads block tables",
        "capacity_differs_from_statement": "the measured capacity differs from the server's statement",
        "capacity_matches_statement": "the measured capacity is what the server states",
        "no_stated_capacity": "the server states no pool size: the measured capacity stands alone",
    },
    KV_EVENTS: {
        "kv_events_sources_unavailable": "the server states no KV event publisher (no GET /kv_event_sources)",
        "kv_events_sources_unreachable": "GET /kv_event_sources could not be asked",
        "kv_events_sources_malformed": "GET /kv_event_sources answered no usable publisher configs",
        "kv_events_not_enabled": "the server publishes no KV events (no --kv-events-config)",
        "kv_events_not_published": "the server's KV event config publishes nothing (disabled, or not ZeroMQ)",
        "kv_events_endpoint_unreachable": "the server publishes where no other process can reach",
        "kv_events_endpoint_unusable": "the stated endpoint cannot be used as a ZeroMQ address",
        "kv_events_connect_style": "the publisher connects to an address kvscope cannot bind: no events",
        "kv_events_connect_style_bound": "the publisher connects to a local address: kvscope binds it",
        "kv_events_no_replay": "the server has no replay endpoint: a missed batch cannot be recovered",
        "kv_events_replay_unreachable": "the replay endpoint is unreachable: missed batches are lost",
        "kv_events_not_connected": "no KV event batch came: the subscription never connected",
        "kv_events_no_batches": "no KV event batch came although the subscription connected",
        "kv_events_late": "the first KV event batch came after the silence warning",
    },
}
CODES: dict[str, Code] = _codes(_SECTIONS)
# Made as {"code", "text"} dicts by the exporter's KV event discovery (the exporter imports no
# harness) and by the run's KV event watch, and relayed into run.json's notes as findings.
RELAYED: frozenset[str] = frozenset(_SECTIONS[KV_EVENTS])


def markdown_table() -> str:
    """The README's "Finding codes" table."""
    rows = ["| code | where | meaning |", "|---|---|---|"]
    rows += [
        f"| `{code}` | {', '.join(c.where)} | {c.meaning.replace('|', '/')} |" for code, c in CODES.items()
    ]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
