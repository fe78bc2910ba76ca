"""The ladder, the concurrency a pool holds, llama.cpp's slots, the measured-terms statement of a
verdict's change, and probe.json's round trip."""

from __future__ import annotations

import pytest

from exporter.parse import parse_exposition
from harness.probe import findings as F
from harness.probe.assemble import finish
from harness.probe.capacity import CapacityModel
from harness.probe.ladder import ladder, unit_for
from harness.probe.render import console, markdown
from harness.probe.result import ProbeResult, read_result, write_result
from harness.probe.stated import StatedPool, stated_pool
from harness.probe.statement import CapacityChange, measured_effect
from tests.harness.probe.observations import observed

BUNDLED_64 = StatedPool("vllm", num_blocks=64, block_size=16, max_model_len=8192)


@pytest.mark.parametrize("max_kv", [1023, 921, 2048, 200, 60])
def test_every_rung_ends_on_a_multiple_of_the_unit_and_within_the_limit(max_kv):
    rungs = ladder(max_kv)
    unit = unit_for(max_kv)
    assert rungs and all(r.kv_tokens % unit == 0 and r.kv_tokens <= max_kv for r in rungs)
    assert all(r.prompt_tokens >= 1 and r.output_tokens >= 1 for r in rungs)
    assert len({r.kv_tokens for r in rungs}) >= 2 or max_kv < 2 * unit  # a slope needs two lengths
    assert len({r.output_tokens for r in rungs}) >= 2  # and outputs as well as prompts vary


def test_no_rung_fits_in_less_than_the_smallest_unit():
    assert ladder(15) == []


def test_a_paged_pool_holds_whole_requests():
    model = CapacityModel(63, 16, 0, True)
    # a request of n tokens holds KV for n - 1 at its last step
    assert [model.holds(n) for n in (17, 18, 257, 258, 1009, 1010)] == [63, 31, 3, 3, 1, 0]
    assert model.blocks_of(257) == 16  # 256 tokens of KV at its last step
    assert model.holds(256, usable_blocks=127) == 7


def test_llamacpp_slots_bound_each_request_to_one_slot():
    per_slot = CapacityModel(8192, 1, 1, True, slots=(2048, 2048, 2048, 2048), slot_layout="per-slot")
    assert per_slot.holds(1000) == 4 and per_slot.holds(2049) == 0
    unified = CapacityModel(8192, 1, 0, True, slots=(8192,) * 4, slot_layout="unified")
    assert unified.holds(1000) == 4 and unified.holds(3000) == 2


def test_the_statement_of_a_larger_pool_keeps_the_null_block_gap():
    result = finish("x", BUNDLED_64, observed(63, 16), [], (("p90", 256),), "")
    effect = measured_effect(result, CapacityChange(pool_blocks=128), 256, "p90")
    assert (effect.before, effect.after) == (3, 7)  # 127 usable / 16
    assert effect.text == "holds 3 requests at your p90 length (256 tokens), 7 with the change"
    replicas = measured_effect(result, CapacityChange(pool_blocks=64, replicas=3), 256)
    assert replicas.after == 9 and "3 per replica x 3" in replicas.text


def test_cutting_max_model_len_helps_a_reservation_and_not_a_paged_pool():
    stated = StatedPool("vllm", num_blocks=7629, block_size=16, max_model_len=32768)
    contiguous = finish("x", stated, observed(7628, 16, reserve=2048, max_kv=2048), [], (), "")
    cut = measured_effect(contiguous, CapacityChange(max_model_len=4096), 2000, "p90")
    assert (cut.before, cut.after) == (3, 29)  # 7,628 // 256
    paged = finish("x", stated, observed(7628, 16, max_kv=2048), [], (), "")
    same = measured_effect(paged, CapacityChange(max_model_len=4096), 2000, "p90")
    assert same.before == same.after == 61 and "whatever max_model_len is" in same.text


def test_no_fit_no_statement():
    result = finish("x", BUNDLED_64, [], [], (), "")
    assert measured_effect(result, CapacityChange(pool_blocks=128), 256) is None
    assert F.TOO_FEW_POINTS in result.codes and F.NO_LENGTHS in result.codes


def test_probe_json_round_trips_and_the_report_names_every_code(tmp_path):
    result = finish("http://x", BUNDLED_64, observed(63, 16), [], (("p50", 256),), "--lengths")
    write_result(tmp_path, result, markdown(result))
    back = read_result(tmp_path)
    assert back == result
    doc = (tmp_path / "probe.json").read_text()
    for key in ("tokens_per_block", "fixed_blocks", "capacity_tokens", "stated_capacity_tokens", "residuals"):
        assert f'"{key}"' in doc
    text = console(result)
    assert "[null_block]" in text and "256 tokens" not in text and "p50" in text
    assert "`null_block`" in (tmp_path / "probe.md").read_text()
    assert isinstance(ProbeResult.from_json(result.to_json()), ProbeResult)


def test_stated_pool_from_vllm_labels_and_llamacpp_slots():
    text = (
        'vllm:cache_config_info{block_size="128",engine="0",kv_cache_max_concurrency="2.84",'
        'kv_cache_size_tokens="2912",num_gpu_blocks="364"} 1.0\n'
    )
    stated = stated_pool("vllm", parse_exposition(text), {"id": "m", "max_model_len": 1024})
    assert (stated.num_blocks, stated.block_size, stated.max_concurrency) == (364, 128, 2.84)
    assert stated.capacity_tokens == 2912 and "kv_cache_size_tokens" in stated.capacity_source
    slots = [{"id": i, "n_ctx": 2048} for i in range(4)]
    llama = stated_pool("llamacpp", parse_exposition(""), {}, slots, "per-slot")
    assert llama.capacity_tokens == 8192 and llama.max_model_len == 2048 and llama.slots == (2048,) * 4
