"""The COST table: coverage, and each rule against the published formula it implements."""

import pytest
from timing_builders import instr, load, matmul, region

from trnsim import hardware
from trnsim.core.isa import Engine, Memory, Opcode
from trnsim.errors import ConfigError
from trnsim.timing import costs as timing
from trnsim.timing.costs import COST, instruction_seconds

SBUF, PSUM, HBM = Memory.SBUF, Memory.PSUM, Memory.HBM


def test_every_opcode_has_a_cost_rule():
    assert COST.missing() == []


def test_a_second_cost_rule_for_an_opcode_is_refused():
    with pytest.raises(ValueError, match="second rule"):
        COST.register(Opcode.MATMUL)(lambda ins, core: 0.0)


def _tensor_seconds(target: str, cycles: float) -> float:
    core = hardware.core(target)
    return cycles / core.engines["tensor"].clock_hz


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("moving_free, expected_cycles", [(512, 512), (256, 256), (16, 64), (1, 64)])
def test_matmul_initiation_interval_is_the_moving_size_with_a_64_cycle_floor(
        target, moving_free, expected_cycles):
    ins = matmul(region(PSUM, moving_free, dtype="float32"), region(SBUF, 128),
                 region(SBUF, moving_free))
    assert instruction_seconds(ins, target) == pytest.approx(_tensor_seconds(target, expected_cycles))


def test_fp32_matmul_costs_four_times_bf16_in_the_body():
    core = hardware.core("trn1")
    bf16 = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, 128), region(SBUF, 512))
    fp32 = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, 128, dtype="float32"),
                  region(SBUF, 512, dtype="float32"))
    ratio = instruction_seconds(fp32, core) / instruction_seconds(bf16, core)
    assert ratio == pytest.approx(core.costs.matmul_fp32_factor)


def test_fp8_double_row_streams_twice_the_contraction_in_the_same_time_on_trn2():
    plain = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, 128, dtype="float8_e4m3"),
                   region(SBUF, 512, dtype="float8_e4m3"))
    double = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, (2, 128), dtype="float8_e4m3"),
                    region(SBUF, (2, 512), dtype="float8_e4m3"), perf_mode="double_row")
    assert instruction_seconds(double, "trn2") == pytest.approx(instruction_seconds(plain, "trn2"))


def _mx_matmul():
    """[128, 128] x [128, 512] stored x4 items: K = 4 x 128 contraction values (trn3)."""
    x4 = "float8_e4m3fn_x4"
    return instr(Opcode.MATMUL_MX, Engine.TENSOR, [region(PSUM, 512, dtype="float32")],
                 [region(SBUF, 128, dtype=x4), region(SBUF, 512, dtype=x4),
                  region(SBUF, 4, dtype="uint8"), region(SBUF, 16, dtype="uint8")])


def test_an_mx_matmul_streams_its_x4_items_at_the_bf16_interval():
    bf16 = matmul(region(PSUM, 512, dtype="float32"), region(SBUF, 128), region(SBUF, 512))
    assert instruction_seconds(_mx_matmul(), "trn3") == pytest.approx(instruction_seconds(bf16, "trn3"))


def test_a_long_stationary_load_shows_only_when_longer_than_the_multiply():
    core = hardware.core("trn1")
    wide = matmul(region(PSUM, 64, dtype="float32"), region(SBUF, 1024), region(SBUF, 64))
    expected = 1024 / core.costs.fast_load_stationary_speedup
    assert instruction_seconds(wide, core) == pytest.approx(_tensor_seconds("trn1", expected))


def _vector(opcode, outputs, inputs, **params):
    return instr(opcode, Engine.VECTOR, outputs, inputs, **params)


def test_tensor_tensor_takes_one_pass_from_psum_and_two_from_sbuf():
    core = hardware.core("trn1")
    two_sbuf = _vector(Opcode.TENSOR_TENSOR, [region(SBUF, 1024, dtype="float32")],
                       [region(SBUF, 1024, dtype="float32"), region(SBUF, 1024, dtype="float32")],
                       op="add")
    one_psum = _vector(Opcode.TENSOR_TENSOR, [region(SBUF, 1024, dtype="float32")],
                       [region(SBUF, 1024, dtype="float32"), region(PSUM, 1024, dtype="float32")],
                       op="add")
    clock = core.engines["vector"].clock_hz
    assert instruction_seconds(two_sbuf, core) == pytest.approx(2 * 1024 / clock)
    assert instruction_seconds(one_psum, core) == pytest.approx(1024 / clock)


def test_small_vector_instructions_pay_the_minimum_interval():
    core = hardware.core("trn1")
    tiny = _vector(Opcode.TENSOR_SCALAR, [region(SBUF, 4, dtype="float32")],
                   [region(SBUF, 4, dtype="float32")])
    assert instruction_seconds(tiny, core) == pytest.approx(
        core.costs.min_ii_cycles / core.engines["vector"].clock_hz)


def test_gen3_bf16_mode_speeds_up_contiguous_copies_by_the_vector_width():
    core = hardware.core("trn2")
    def copy(dtype, stride=1):
        return _vector(Opcode.TENSOR_COPY, [region(SBUF, 4096, dtype=dtype)],
                       [region(SBUF, 4096, dtype=dtype, stride=stride)])
    fast = instruction_seconds(copy("bfloat16"), core)
    slow = instruction_seconds(copy("float32"), core)
    vector = core.engines["vector"]
    assert slow / fast == pytest.approx(vector.width("bf16") / vector.width("default"))
    # the same copy gains nothing on NC-v2, whose Vector engine has one width
    trn1 = [instruction_seconds(copy(d), "trn1") for d in ("bfloat16", "float32")]
    assert trn1[0] == pytest.approx(trn1[1])


def test_a_wide_minor_stride_halves_the_rate():
    core = hardware.core("trn1")
    def copy(stride):
        return _vector(Opcode.TENSOR_COPY, [region(SBUF, 2048, dtype="float32")],
                       [region(SBUF, 2048, dtype="float32", stride=stride)])
    ratio = instruction_seconds(copy(8), core) / instruction_seconds(copy(1), core)
    assert ratio == pytest.approx(core.costs.stride_penalty_factor)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_a_dma_holds_its_queue_for_the_bytes_at_the_queue_rate_after_a_fixed_issue_latency(target):
    """An engine instruction's SBUF/PSUM access overhead is its issue latency the same way."""
    core = hardware.core(target)
    wide = load(region(SBUF, 2048), region(HBM, 2048))  # 4 KiB per partition: full rate
    assert instruction_seconds(wide, core) == pytest.approx(
        128 * 2048 * 2 / core.dma_bytes_per_s_per_queue)
    assert timing.issue_latency_s(wide, core) == core.dma_fixed_latency_s
    copy = instr(Opcode.TENSOR_COPY, Engine.VECTOR, [region(SBUF, 64)], [region(SBUF, 64)])
    assert timing.issue_latency_s(copy, core) == pytest.approx(
        core.costs.access_overhead_cycles / core.engines["vector"].clock_hz)


def test_small_rows_reach_only_part_of_the_dma_rate():
    core = hardware.core("trn1")
    narrow = load(region(SBUF, 512), region(HBM, 512))  # 1 KiB per partition
    full_rate_s = 128 * 512 * 2 / core.dma_bytes_per_s_per_queue
    assert instruction_seconds(narrow, core) == pytest.approx(
        full_rate_s / core.costs.dma_small_transfer_efficiency)


def test_dma_transposes_run_at_their_published_fraction_of_the_rate():
    core = hardware.core("trn2")
    src, dst = region(HBM, 2048), region(SBUF, 2048)
    plain = instruction_seconds(load(dst, src), core)
    transposed = instruction_seconds(instr(Opcode.DMA_TRANSPOSE, Engine.DMA, [dst], [src]), core)
    assert plain / transposed == pytest.approx(core.costs.dma_transpose_hbm_efficiency)


def test_a_dma_cast_is_charged_at_the_wider_element():
    same = load(region(SBUF, 2048, dtype="float32"), region(HBM, 2048, dtype="float32"))
    cast = load(region(SBUF, 2048, dtype="bfloat16"), region(HBM, 2048, dtype="float32"))
    assert timing.dma_bytes(cast) == timing.dma_bytes(same) == 128 * 2048 * 4


def test_a_target_without_timing_figures_is_refused():
    with pytest.raises(ConfigError, match="no published timing figures"):
        timing.core_spec("inf1")
