"""Engine arguments declared once (`reference_engine.engine_args`): the flags, their choices and
defaults come from the config dataclasses, and parsing them gives back those configs."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from typing import get_args

import pytest

from reference_engine.config import (
    ALLOCATORS,
    ATTENTION_BACKENDS,
    KV_CACHE_DTYPES,
    AllocatorMode,
    EngineConfig,
    KVCacheDType,
)
from reference_engine.engine_args import (
    add_engine_args,
    engine_args,
    engine_config_from_args,
    serve_options_from_args,
    simulator_config_from_args,
)
from reference_engine.serve_options import ServeOptions
from reference_engine.sim.spec import SimSpec
from tests.support.paths import ROOT


def _parser(groups=("server", "engine", "simulator")) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_engine_args(parser, groups)
    return parser


def test_no_flag_or_dest_is_declared_twice() -> None:
    args = engine_args()
    assert len({a.flag for a in args}) == len(args)
    assert len({a.dest for a in args}) == len(args)


def test_choices_come_from_the_literals() -> None:
    by_flag = {a.flag: a for a in engine_args()}
    assert ALLOCATORS == get_args(AllocatorMode) == ("paged", "contiguous", "contiguous-oracle")
    assert KV_CACHE_DTYPES == get_args(KVCacheDType)
    assert by_flag["--allocator"].choices == ALLOCATORS
    assert by_flag["--kv-cache-dtype"].choices == KV_CACHE_DTYPES
    assert by_flag["--attention-backend"].choices == ATTENTION_BACKENDS
    assert by_flag["--log-level"].choices == ("debug", "info", "warning", "error")
    assert by_flag["--sim-weight-dtype"].choices == ("auto", "bf16", "fp16", "fp8", "int8", "int4")


def test_defaults_parse_to_the_dataclass_defaults() -> None:
    ns = _parser().parse_args([])
    assert engine_config_from_args(ns) == EngineConfig()
    assert serve_options_from_args(ns) == ServeOptions()
    assert simulator_config_from_args(ns) is None  # --simulate is off


def test_flags_set_their_fields() -> None:
    ns = _parser().parse_args(
        [
            "--num-blocks", "48", "--block-size", "8", "--allocator", "contiguous",
            "--no-enable-prefix-caching", "--kv-cache-dtype", "fp8", "--dtype", "bfloat16",
            "--seed", "7", "--num-threads", "1",
            "--simulate", "--sim-model", "llama-3.1-8b", "--sim-gpu", "l4", "--tensor-parallel-size", "2",
            "--gpu-memory-utilization", "0.8", "--sim-weight-dtype", "fp8",
            "--port", "0", "--served-model-name", "m", "--shutdown-grace", "2.5", "--access-log",
        ]
    )  # fmt: skip
    assert engine_config_from_args(ns) == EngineConfig(
        num_blocks=48,
        block_size=8,
        allocator="contiguous",
        enable_prefix_caching=False,
        kv_cache_dtype="fp8",
        dtype="bfloat16",
        seed=7,
        num_threads=1,
    )
    assert simulator_config_from_args(ns) == SimSpec("llama-3.1-8b", "l4", 2, 0.8, "fp8")
    assert serve_options_from_args(ns) == ServeOptions(
        port=0, served_model_name="m", shutdown_grace=2.5, access_log=True
    )


def test_a_value_outside_the_literal_is_refused() -> None:
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        _parser().parse_args(["--kv-cache-dtype", "fp4"])


def test_pool_size_flags_exclude_each_other() -> None:
    with pytest.raises(argparse.ArgumentError, match="not allowed with"):
        _parser(("engine",)).parse_args(["--num-blocks", "8", "--kv-cache-memory", "4096"])


def test_a_namespace_of_unset_flags_builds_the_defaults() -> None:
    """The harness parses the same flags with no defaults (None = not given)."""
    unset = argparse.Namespace(**{a.dest: None for a in engine_args()})
    assert engine_config_from_args(unset) == EngineConfig()
    assert simulator_config_from_args(argparse.Namespace(simulate=True)) == SimSpec()


def test_help_states_the_engine_default() -> None:
    by_flag = {a.flag: a for a in engine_args()}
    assert by_flag["--block-size"].help == "tokens per KV block (default: 16)"
    assert by_flag["--num-blocks"].help.endswith(f"(default: {EngineConfig().default_num_blocks})")


def test_every_engine_field_but_internal_ones_has_a_flag() -> None:
    flagged = {a.field for a in engine_args("engine")}
    assert {f.name for f in dataclasses.fields(EngineConfig)} - flagged == {"watermark", "default_num_blocks"}
    assert {a.field for a in engine_args("simulator")} - {None} == {
        f.name for f in dataclasses.fields(SimSpec)
    }


def test_the_api_key_stays_out_of_reprs() -> None:
    assert "s3cret" not in repr(ServeOptions(api_key="s3cret"))


def test_unknown_group_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown argument group"):
        engine_args("harness")  # type: ignore[arg-type]


def test_serve_help_lists_every_flag() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "engine", "serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for a in engine_args():
        assert a.flag in proc.stdout
    for title in ("server:", "engine:", "simulation:"):
        assert title in proc.stdout


def test_engine_args_stay_light() -> None:
    code = (
        "import sys, reference_engine.engine_args, reference_engine.cli\n"
        "heavy = [m for m in ('torch', 'aiohttp', 'numpy', 'harness', 'exporter') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
