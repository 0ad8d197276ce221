"""Each hardware check raises a clear error that names the kernel's file and line."""

import os
import pathlib
import warnings

import ml_dtypes
import numpy as np
import pytest

import trnsim
import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import config, hardware
from trnsim.errors import (
    CapacityError,
    DTypeError,
    HazardError,
    KernelError,
    KernelWarning,
    ShapeError,
    UnsupportedError,
)

HERE = __file__
NAME = os.path.basename(__file__)
X = np.ones((128, 512), np.float32)


def line_of(path: str, marker: str) -> int:
    """The line number of the first line of `path` containing `marker`."""
    for number, text in enumerate(pathlib.Path(path).read_text().splitlines(), start=1):
        if marker in text and "line_of" not in text:
            return number
    raise AssertionError(f"marker {marker!r} not found in {path}")


def expect(error_type, marker, kernel, *args, target="trn2"):
    with pytest.raises(error_type) as caught:
        nki.simulate(kernel, target=target)(*args)
    assert f"{NAME}:{line_of(HERE, marker)}" in str(caught.value), str(caught.value)
    return caught.value


def test_partition_dimension_over_128():
    def kernel(x):
        nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)  # MARK-P256
    error = expect(ShapeError, "MARK-P256", kernel, X)
    assert "256" in str(error) and "128" in str(error)


def test_matmul_moving_free_limit_on_trn2_but_not_trn3_bf16():
    def kernel(x):
        a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
        b = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=a, value=1.0)
        nisa.memset(dst=b, value=1.0)
        p = nl.ndarray((128, 1024), dtype=x.dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=b)  # MARK-N
    error = expect(ShapeError, "MARK-N", kernel, X)
    assert "moving free size N is 1024" in str(error) and "512" in str(error)
    nki.simulate(kernel, target="trn3")(np.ones((2, 2), ml_dtypes.bfloat16))  # bf16 PSUM result: allowed


def test_matmul_stationary_free_and_contraction_mismatch():
    def too_wide(x):
        a = nl.zeros((128, 256), dtype=nl.bfloat16)
        b = nl.zeros((128, 64), dtype=nl.bfloat16)
        p = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.psum)  # MARK-WIDE-ALLOC
        nisa.nc_matmul(dst=p, stationary=a, moving=b)

    def mismatch(x):
        a = nl.zeros((64, 128), dtype=nl.bfloat16)
        b = nl.zeros((128, 64), dtype=nl.bfloat16)
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=b)  # MARK-K
    expect(ShapeError, "MARK-WIDE-ALLOC", too_wide, X)
    assert "contraction mismatch" in str(expect(ShapeError, "MARK-K", mismatch, X))


def test_start_partition_rule():
    def kernel(x):
        t = nl.zeros((128, 4), dtype=nl.float32)
        u = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u[0:64, :], src=t[16:80, :])  # MARK-START
    error = expect(ShapeError, "MARK-START", kernel, X)
    assert "starts at partition 16" in str(error)


def test_psum_tile_crossing_a_bank():
    def kernel(x):
        nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, address=1024)  # MARK-BANK
    error = expect(CapacityError, "MARK-BANK", kernel, X)
    assert "bank" in str(error)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_an_instruction_whose_operands_exceed_sbuf_is_refused_at_its_line(target):
    """Three tiles of 40% of a partition each, all operands of one instruction: no placement or
    spill can fit them (each alone fits, so the tiles themselves are made)."""
    width = hardware.core(target).sbuf_bytes_per_partition * 2 // 5 // 4

    def kernel(x):
        a = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf, name="big_a")
        b = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf, name="big_b")
        c = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf, name="big_c")
        nisa.memset(dst=a, value=1.0)
        nisa.memset(dst=b, value=2.0)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)  # MARK-FULL
    error = expect(CapacityError, "MARK-FULL", kernel, X, target=target)
    assert "big_" in str(error) and error.memory == "sbuf" and error.required == width * 4
    assert "nisa.tensor_tensor" in str(error)


def test_dropped_tiles_free_their_space():
    def kernel(x):
        for _ in range(10):
            nl.ndarray((128, 34000), dtype=nl.float32, buffer=nl.sbuf)  # dropped right away
    nki.simulate(kernel, target="trn2")(X)


def test_psum_tiles_all_still_accumulating_do_not_fit_a_ninth():
    """Eight 2 KiB tiles fill PSUM's 16 KiB; each is read again after the ninth is written, so all
    nine are live at once, and PSUM tiles are never spilled."""
    def kernel(x):
        a = nl.zeros((128, 128), dtype=nl.float32)
        b = nl.zeros((128, 512), dtype=nl.float32)
        tiles = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(9)]
        for tile in tiles:
            nisa.nc_matmul(dst=tile, stationary=a, moving=b)  # MARK-PSUM-FULL
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        for tile in tiles:
            nisa.tensor_copy(dst=out, src=tile)
    error = expect(CapacityError, "MARK-PSUM-FULL", kernel, X)
    assert "PSUM cannot hold" in str(error) and "not spilled" in str(error)


def test_partition_count_mismatch():
    def kernel(x):
        src = nl.zeros((128, 2), dtype=nl.float32)
        dst = nl.ndarray((64, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=src)  # MARK-PMISMATCH
    assert "same number of partitions" in str(expect(ShapeError, "MARK-PMISMATCH", kernel, X))


def test_e4m3fn_illegal_before_trn3():
    def kernel(x):
        t = nl.ndarray((128, 4), dtype=nl.float8_e4m3fn, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)  # MARK-FN
    error = expect(DTypeError, "MARK-FN", kernel, X)
    assert "float8_e4m3fn" in str(error) and "trn2" in str(error)


def test_mixed_fp8_kinds_and_fp32_pairing():
    def mixed(x):
        a = nl.zeros((128, 128), dtype=nl.float8_e4m3)
        b = nl.zeros((128, 128), dtype=nl.float8_e4m3fn)
        p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=b)  # MARK-MIXED

    def fp32_pair(x):
        a = nl.zeros((128, 128), dtype=nl.float32)
        b = nl.zeros((128, 128), dtype=nl.bfloat16)
        p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=b)  # MARK-F32
    assert "mixed fp8" in str(expect(DTypeError, "MARK-MIXED", mixed, X, target="trn3"))
    assert "fp32" in str(expect(DTypeError, "MARK-F32", fp32_pair, X))


def test_output_not_in_shared_hbm():
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)  # MARK-OUT
        nisa.dma_copy(dst=out, src=x)
        return out
    assert "shared_hbm" in str(expect(KernelError, "MARK-OUT", kernel, X))


def test_dma_cannot_read_psum():
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.dma_copy(dst=out, src=p)  # MARK-DMA-PSUM
        return out
    assert "PSUM" in str(expect(KernelError, "MARK-DMA-PSUM", kernel, X))


def test_out_of_bounds_access():
    def sliced(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[0:128, 256:768])  # MARK-OOB

    def pattern(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[512, 128], [1, 512]], offset=10))  # MARK-AP
    assert "out of bounds" in str(expect(HazardError, "MARK-OOB", sliced, X))
    assert "pattern" in str(expect(HazardError, "MARK-AP", pattern, X))


def test_accumulate_true_on_uninitialised_psum_warns():
    def kernel(x):
        a = nl.zeros((128, 128), dtype=nl.bfloat16)
        p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=a, accumulate=True)  # MARK-ACC
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        nki.simulate(kernel, target="trn2")(X)
    messages = [str(w.message) for w in seen if issubclass(w.category, KernelWarning)]
    assert messages and f"{NAME}:{line_of(HERE, 'MARK-ACC')}" in messages[0]
    for eager in (False, True):  # made an error by the caller: raised as itself, not as a trnsim bug
        with warnings.catch_warnings(), trnsim.config.override(eager=eager):
            warnings.simplefilter("error", KernelWarning)
            with pytest.raises(KernelWarning, match="never written"):
                nki.simulate(kernel, target="trn2")(X)


def test_strict_mode_raises_on_uninitialised_read():
    def kernel(x):
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t)  # MARK-STRICT
    with config.override(strict=True):
        expect(HazardError, "MARK-STRICT", kernel, X)
    nki.simulate(kernel, target="trn2")(X)  # not strict: reads the NaN fill


def test_generation_gated_instruction():
    def kernel(x):
        t = nl.zeros((128, 4), dtype=nl.float32)
        nisa.exponential(dst=t, src=t)  # MARK-GEN
    error = expect(UnsupportedError, "MARK-GEN", kernel, X)
    assert "generation 4" in str(error)
    nki.simulate(kernel, target="trn3")(X)


def test_double_row_needs_fp8_and_gen3():
    def kernel(x):
        a = nl.zeros((128, 2, 64), dtype=nl.bfloat16)
        p = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=a, perf_mode=nisa.matmul_perf_mode.double_row)  # MARK-DR
    assert "fp8" in str(expect(DTypeError, "MARK-DR", kernel, X))


def test_matmul_tile_size_and_position_rules():
    def kernel(x, size, position):
        a = nl.zeros((32, 32), dtype=nl.bfloat16)
        p = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a, moving=a, tile_size=size, tile_position=position)  # MARK-TILE
    nki.simulate(kernel, target="trn2")(X, (32, 32), (96, 32))
    assert "tile_size" in str(expect(ShapeError, "MARK-TILE", lambda x: kernel(x, (32, 32), (0, 0)), X,
                                     target="trn1"))
    assert "multiples" in str(expect(ShapeError, "MARK-TILE", lambda x: kernel(x, (64, 64), (32, 0)), X))


def test_lnc_exchange_needs_trn2_or_later():
    def kernel(x):
        t = nl.zeros((4, 4), dtype=nl.float32)
        nisa.core_barrier(data=t, cores=(0, 1))  # MARK-LNC
    assert "generation 3" in str(expect(UnsupportedError, "MARK-LNC", kernel, X, target="trn1"))


def test_gpsimd_cannot_touch_psum_and_tensor_tensor_takes_one_psum_input():
    def gpsimd(x):
        p = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.psum)
        nisa.iota(dst=p, pattern=[[1, 4]])  # MARK-GPSIMD

    def two_psum(x):
        a = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.psum)
        b = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.psum)
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=a, data2=b, op=nl.add)  # MARK-2PSUM
    assert "GpSimd" in str(expect(KernelError, "MARK-GPSIMD", gpsimd, X))
    assert "at most one" in str(expect(KernelError, "MARK-2PSUM", two_psum, X))


def test_base_partition_from_address_moves_the_region():
    def kernel(x):
        upper = nl.ndarray((32, 4), dtype=nl.float32, buffer=nl.sbuf, address=(64, 0))
        nisa.memset(dst=upper, value=1.0)
        odd = nl.ndarray((32, 4), dtype=nl.float32, buffer=nl.sbuf, address=(16, 0))
        nisa.memset(dst=odd, value=1.0)  # MARK-BASE
    error = expect(ShapeError, "MARK-BASE", kernel, X)
    assert "starts at partition 16" in str(error)


def test_elementwise_free_size_mismatch():
    def kernel(x):
        a = nl.zeros((128, 64), dtype=nl.float32)
        b = nl.zeros((128, 32), dtype=nl.float32)
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=a, data2=b, op=nl.add)  # MARK-FREE
    assert "elements per partition" in str(expect(ShapeError, "MARK-FREE", kernel, X))
