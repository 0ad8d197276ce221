"""The profile summary: latency, engine busy time, DMA traffic, FLOPs, HFU/MFU, hot spots."""

import pytest
from timing_builders import compute_bound_trace, instr, load, matmul, region

from trnsim import hardware
from trnsim.core.isa import Engine, Memory, Opcode
from trnsim.core.trace import Trace
from trnsim.timing.profile import profile_trace, summarize
from trnsim.timing.schedule import schedule

SBUF, PSUM, HBM = Memory.SBUF, Memory.PSUM, Memory.HBM


def test_flops_and_hfu_of_a_matmul_chain():
    tiles = 256
    timeline = schedule(compute_bound_trace(tiles=tiles), "trn1")
    summary = summarize(timeline)
    flops = tiles * 2 * 128 * 128 * 512
    assert summary.flops == flops
    peak = hardware.core("trn1").peak_flops["bf16"]
    assert summary.peak_flops_per_s == pytest.approx(peak)
    assert summary.hfu == pytest.approx(flops / (peak * summary.latency_s))
    assert summary.mfu is None
    assert summarize(timeline, model_flops=flops / 2).mfu == pytest.approx(summary.hfu / 2)


def test_fp32_matmuls_are_measured_against_the_fp32_peak():
    fp32 = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, 128, dtype="float32"),
                  region(SBUF, 512, dtype="float32"))
    summary = summarize(schedule(Trace("trn2", [fp32]), "trn2"))
    assert summary.peak_flops_per_s == pytest.approx(hardware.core("trn2").peak_flops["fp32"])


def test_mx_matmuls_count_four_values_per_item_against_the_mx_peak():
    x4 = "float8_e4m3fn_x4"
    mx = instr(Opcode.MATMUL_MX, Engine.TENSOR, [region(PSUM, 512, dtype="float32")],
               [region(SBUF, 128, dtype=x4), region(SBUF, 512, dtype=x4),
                region(SBUF, 4, dtype="uint8"), region(SBUF, 16, dtype="uint8")])
    summary = summarize(schedule(Trace("trn3", [mx]), "trn3"))
    assert summary.flops == 2 * (4 * 128) * 128 * 512
    assert summary.peak_flops_per_s == pytest.approx(hardware.core("trn3").peak_flops["mxfp8"])


def test_fp8_double_row_counts_both_rows():
    fp8 = "float8_e4m3"
    double = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, (2, 128), dtype=fp8),
                    region(SBUF, (2, 512), dtype=fp8), perf_mode="double_row")
    summary = summarize(schedule(Trace("trn2", [double]), "trn2"))
    assert summary.flops == 2 * 256 * 128 * 512
    assert summary.peak_flops_per_s == pytest.approx(hardware.core("trn2").peak_flops["fp8"])


def test_engine_busy_time_and_dma_traffic():
    trace = compute_bound_trace(tiles=64)
    timeline = schedule(trace, "trn1")
    summary = summarize(timeline)
    tensor = summary.engines["tensor"]
    assert tensor.instructions == 64
    assert tensor.busy_s == pytest.approx(timeline.duration_s[2:66].sum())
    assert tensor.busy_fraction == pytest.approx(tensor.busy_s / summary.latency_s)
    dma = summary.engines["dma"]
    assert dma.instructions == 3
    assert dma.busy_fraction == pytest.approx(dma.busy_s / (summary.latency_s * 16))
    moved = 128 * 128 * 2 + 128 * 512 * 2 + 128 * 512 * 2
    assert summary.dma_bytes == moved
    assert summary.dma_bytes_per_s == pytest.approx(moved / summary.latency_s)


def test_top_lists_the_longest_opcodes_first_and_the_critical_path_is_busy_time():
    summary = summarize(schedule(compute_bound_trace(tiles=512), "trn1"), top=2)
    assert [h.opcode for h in summary.top] == ["nc_matmul", "dma_copy"]
    assert summary.top[0].count == 512
    assert summary.top[0].total_s >= summary.top[1].total_s
    assert 0 < summary.critical_path_s <= summary.latency_s
    assert summary.critical_path[0].total_s >= summary.critical_path[-1].total_s


def test_profile_trace_times_one_trace_per_target_and_as_dict_is_plain_data():
    results = profile_trace(compute_bound_trace(tiles=8), ["trn1", "trn3"])
    assert list(results) == ["trn1", "trn3"]
    assert results["trn1"][1].latency_s != results["trn3"][1].latency_s
    data = results["trn3"][1].as_dict()
    assert data["target"] == "trn3" and data["core"] == "NeuronCore-v4"
    assert data["engines"]["tensor"]["instructions"] == 8


def test_a_kernel_with_only_vector_work_has_no_flops_and_zero_hfu():
    copy = instr(Opcode.TENSOR_COPY, Engine.VECTOR, [region(SBUF, 512)], [region(SBUF, 512)])
    summary = summarize(schedule(Trace("trn2", [copy, load(region(HBM, 512), region(SBUF, 512))])))
    assert summary.flops == 0 and summary.hfu == 0.0


def test_plain_fp8_runs_against_the_16_bit_peak():
    fp8 = "float8_e4m3"
    plain = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, 128, dtype=fp8),
                   region(SBUF, 512, dtype=fp8))
    summary = summarize(schedule(Trace("trn2", [plain]), "trn2"))
    assert summary.peak_flops_per_s == pytest.approx(hardware.core("trn2").peak_flops["bf16"])


def test_utilization_is_unknown_when_the_peak_is_not_published():
    fp8 = "float8_e4m3"
    double = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, (2, 128), dtype=fp8),
                    region(SBUF, (2, 512), dtype=fp8), perf_mode="double_row")
    assert "fp8" not in hardware.core("trn3").peak_flops
    summary = summarize(schedule(Trace("trn3", [double]), "trn3"), model_flops=1e9)
    assert summary.hfu is None and summary.mfu is None and summary.peak_flops_per_s is None
    assert summary.unpublished_peaks == ("fp8",)
    assert summary.flops > 0
