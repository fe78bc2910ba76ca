"""Workload options as data: one spec for Locust's command line and kvscope run's."""

from __future__ import annotations

import argparse

from harness.workload.options import WORKLOADS, add_to_parser, options_for, to_argv


def test_workload_options_round_trip() -> None:
    parser = argparse.ArgumentParser()
    add_to_parser(parser, options_for("shared_prefix"))
    add_to_parser(parser, options_for("shared_prefix"))  # idempotent: a second locustfile adds nothing
    ns = parser.parse_args(["--prefix-tokens", "64", "--no-calibrate"])
    assert ns.prefix_tokens == 64 and ns.no_calibrate and ns.num_prefixes == 4
    assert to_argv(options_for("shared_prefix"), argparse.Namespace(prefix_tokens=64, no_calibrate=True)) == [
        "--no-calibrate",
        "--prefix-tokens",
        "64",
    ]
    assert {o.dest for o in options_for("rate")} >= {"rate", "prompt_tokens"}
    assert next(o.default for o in options_for("rate") if o.dest == "rate") == 2.0
    assert all(spec.summary for spec in WORKLOADS.values())
