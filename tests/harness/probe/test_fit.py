"""The fit recovers a pool's terms from what lone requests show, says which figure it could not
measure and why (with a stable code), and never makes one up."""

from __future__ import annotations

import dataclasses

import pytest

from harness.probe import findings as F
from harness.probe.assemble import finish
from harness.probe.fit import fit_pool, level_denominator, line
from harness.probe.stated import StatedPool
from tests.harness.probe.observations import observed

BUNDLED_64 = StatedPool("vllm", num_blocks=64, block_size=16, max_model_len=8192)


def test_a_paged_pool_of_63_usable_16_token_blocks_is_measured_exactly():
    fit = fit_pool(observed(63, 16), BUNDLED_64)
    assert (fit.usable_blocks, fit.tokens_per_block, fit.fixed_blocks) == (63, 16, 0)
    assert fit.whole_blocks and fit.capacity_tokens == 63 * 16
    assert fit.usable_blocks_source.startswith("measured")
    assert fit.max_abs_residual == pytest.approx(0, abs=1e-9)
    assert not fit.findings


def test_the_null_block_explains_the_gap_to_the_stated_capacity():
    result = finish("x", BUNDLED_64, observed(63, 16), [], (("256 tokens", 256),), "--lengths")
    assert F.NULL_BLOCK in result.codes
    assert result.stated.capacity_tokens == 1024 and result.fit.capacity_tokens == 1008
    row = result.concurrency[0]
    assert (row.blocks_per_request, row.requests, row.naive) == (16, 3, 4)
    assert result.concurrency[-1].label == "max_model_len" and result.concurrency[-1].requests == 0


def test_a_pool_of_16_blocks_is_measured_where_the_statement_confirms_it():
    # 3/16 and 4/16 read like usage rounded to 4 decimals; num_gpu_blocks 17 settles it
    fit = fit_pool(observed(16, 128, max_kv=1023), StatedPool("vllm", num_blocks=17, block_size=128))
    assert (fit.usable_blocks, fit.tokens_per_block) == (16, 128)
    assert fit.usable_blocks_source == "measured: usage moves in steps of 1/16"


def test_vllm_cpu_128_token_blocks_and_a_fixed_block_per_request():
    stated = StatedPool("vllm", num_blocks=365, block_size=128, max_model_len=1024)
    fit = fit_pool(observed(364, 128, fixed=1, max_kv=1023), stated)
    assert (fit.usable_blocks, fit.tokens_per_block, fit.fixed_blocks) == (364, 128, 1)
    assert fit.capacity_tokens == 364 * 128


def test_without_a_statement_the_pool_is_measured_from_the_staircase_alone():
    fit = fit_pool(observed(1001, 32, max_kv=2048), StatedPool())
    assert (fit.usable_blocks, fit.tokens_per_block) == (1001, 32)
    assert fit.usable_blocks_source.startswith("measured")
    # 1,000 usable blocks read like usage rounded to 3 decimals: only a statement settles it
    assert fit_pool(observed(1000, 32, max_kv=2048), StatedPool()).usable_blocks is None
    stated = StatedPool("vllm", num_blocks=1001, block_size=32)
    confirmed = fit_pool(observed(1000, 32, max_kv=2048), stated)
    assert confirmed.usable_blocks == 1000 and confirmed.usable_blocks_source.startswith("measured")


def test_a_reservation_is_a_fixed_cost_and_no_block_size():
    stated = StatedPool("vllm", num_blocks=7629, block_size=16, max_model_len=32768)
    fit = fit_pool(observed(7628, 16, reserve=2048, max_kv=2048), stated)
    assert fit.tokens_per_block is None and fit.fixed_blocks == 2048
    assert fit.usable_blocks == 7628 and F.POOL_BLOCKS_STATED in [f.code for f in fit.findings]
    assert F.NO_GROWTH in [f.code for f in fit.findings]
    result = finish("x", stated, observed(7628, 16, reserve=2048, max_kv=2048), [], (("2k", 2000),), "")
    row = result.concurrency[0]
    assert row.requests == 3 and row.naive == pytest.approx(61.04, abs=0.01)
    assert F.NULL_BLOCK in result.codes  # 7,628 x 16 against the stated 7,629 x 16


def test_rounded_usage_gives_no_block_count_and_says_so():
    obs = [
        dataclasses.replace(o, peak_usage=round(o.peak_usage, 2), levels=tuple(round(v, 2) for v in o.levels))
        for o in observed(63, 16)
    ]
    fit = fit_pool(obs, StatedPool())
    assert fit.usable_blocks is None and fit.tokens_per_block is None
    assert F.POOL_BLOCKS_UNMEASURED in [f.code for f in fit.findings]
    assert fit.capacity_tokens == pytest.approx(1008, rel=0.05)  # the slope still gives tokens


def test_idle_usage_is_subtracted():
    fit = fit_pool(observed(63, 16, idle=5 / 63), BUNDLED_64)
    assert (fit.usable_blocks, fit.tokens_per_block, fit.fixed_blocks) == (63, 16, 0)


def test_preempted_crowded_and_failed_requests_are_left_out_with_their_codes():
    obs = observed(255, 16, max_kv=2048)
    obs[0] = dataclasses.replace(obs[0], preemptions=2.0)
    obs[1] = dataclasses.replace(obs[1], max_running=3.0)
    obs[2] = dataclasses.replace(obs[2], error="HTTP 500: boom")
    fit = fit_pool(obs, StatedPool("vllm", num_blocks=256, block_size=16))
    codes = [f.code for f in fit.findings]
    assert {F.PROBE_PREEMPTED, F.OTHER_LOAD, F.REQUEST_FAILED} <= set(codes)
    assert len(fit.points) == len(obs) - 3 and fit.tokens_per_block == 16


def test_too_few_points_is_no_figure():
    obs = observed(63, 16)[:1]
    fit = fit_pool(obs, BUNDLED_64)
    assert fit.capacity_tokens is None and fit.tokens_per_block is None
    assert [f.code for f in fit.findings] == [F.TOO_FEW_POINTS]
    result = finish("x", BUNDLED_64, obs, [], (("256", 256),), "")
    assert result.concurrency[0].requests is None and result.concurrency[0].naive == 4


def test_usage_that_never_rose_is_said():
    obs = [dataclasses.replace(o, peak_usage=0.0, levels=()) for o in observed(63, 16)]
    fit = fit_pool(obs, BUNDLED_64)
    assert fit.capacity_tokens is None
    assert {F.USAGE_NEVER_ROSE, F.TOO_FEW_POINTS} <= {f.code for f in fit.findings}


def test_level_denominator_needs_a_one_block_step():
    assert level_denominator([0.0, 16 / 63, 17 / 63]) == 63
    assert level_denominator([0.0, 2048 / 7628]) is None  # one level: 512/1907 too
    assert level_denominator([0.47, 0.48, 0.5]) == 100  # rounded, or a pool of 100: the fit decides
    assert line([1, 2, 3], [2, 4, 6]) == pytest.approx((0.0, 2.0))


def _peak_off(obs, index: int, tokens: int, pool: int):
    o = obs[index]
    return [*obs[:index], dataclasses.replace(o, peak_usage=o.peak_usage + tokens / pool), *obs[index + 1 :]]


def test_a_token_pool_read_a_token_off_one_peak_is_still_one_token_per_block_and_says_so():
    # llama.cpp's slots count tokens: a peak lasts one decode step, and a loaded machine's read
    # can land a few tokens short of it (or on the final token)
    stated = StatedPool("llamacpp", block_size=1, max_model_len=2048)
    for off in (-1, 1, -2, -7):
        fit = fit_pool(_peak_off(observed(8192, 1, max_kv=2047), 1, off, 8192), stated)
        assert (fit.tokens_per_block, fit.fixed_blocks, fit.whole_blocks) == (1, 0, True)
        assert fit.capacity_tokens == 8192
        assert [f.code for f in fit.findings] == [F.PEAK_READ_LAG]


def test_read_lag_is_no_excuse_for_nine_tokens_or_for_block_pools():
    stated = StatedPool("llamacpp", block_size=1, max_model_len=2048)
    fit = fit_pool(_peak_off(observed(8192, 1, max_kv=2047), 1, -9, 8192), stated)
    assert not fit.whole_blocks and F.NOT_WHOLE_BLOCKS in [f.code for f in fit.findings]
    # a 16-token pool holds its peak for 16 decode steps: one block off is no read lag
    fit = fit_pool(_peak_off(observed(63, 16), 1, -1, 63), BUNDLED_64)
    assert not fit.whole_blocks and F.PEAK_READ_LAG not in [f.code for f in fit.findings]
