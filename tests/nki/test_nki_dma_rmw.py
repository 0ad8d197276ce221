"""DMA read-modify-write through an index tile: nisa.dma_compute's scatter and gather with
vector_offset (NKI 0.6), and the old API's atomic_rmw and dma_copy(dst_rmw_op=np.add) built on it.
Each is checked bit for bit against numpy doing the same fp32 adds and roundings."""

import ml_dtypes
import numpy as np
import pytest
from kernel_helpers import on_chip, to_hbm

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
import trnsim.nki.legacy as old
from trnsim.errors import ArgumentError, HazardError, UnsupportedError

RNG = np.random.default_rng(11)
BF16 = ml_dtypes.bfloat16
LINE = r"^test_nki_dma_rmw\.py:\d+ in "


def rows_of(table, index_tile, count):
    """table's rows picked by index_tile (one index per partition): a vector_offset access."""
    width = table.shape[1]
    return table.ap(pattern=[[width, count], [1, width]], offset=0, vector_offset=index_tile, indirect_dim=0)


def scatter_add(table, idx, values):
    """table[idx[p]] += values[p], returned as a new HBM tensor."""
    out = to_hbm(on_chip(table))
    index, data = on_chip(idx), on_chip(values)
    dst = rows_of(out, index, values.shape[0])
    nisa.dma_compute(dst=dst, srcs=[dst, data], reduce_op=nl.add)
    return out


def gather_add(table, idx, acc):
    """acc[p] + table[idx[p]], computed into acc's SBUF tile."""
    tile, index = on_chip(acc), on_chip(idx)
    nisa.dma_compute(dst=tile, srcs=[rows_of(table, index, acc.shape[0]), tile], reduce_op=nl.add)
    return to_hbm(tile)


def distinct_rows(count, of):
    return RNG.permutation(of)[:count].astype(np.int32).reshape(count, 1)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_scatter_add_adds_into_the_picked_rows_in_fp32(dtype):
    table = RNG.standard_normal((64, 32)).astype(dtype)
    values = RNG.standard_normal((16, 32)).astype(dtype)
    idx = distinct_rows(16, 64)
    expected = table.copy()
    picked = idx[:, 0]
    expected[picked] = (table[picked].astype(np.float32) + values.astype(np.float32)).astype(dtype)
    result = nki.simulate(scatter_add)(table, idx, values)
    np.testing.assert_array_equal(result.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_gather_add_adds_the_picked_rows_to_the_tile(dtype):
    table = RNG.standard_normal((64, 32)).astype(dtype)
    acc = RNG.standard_normal((16, 32)).astype(dtype)
    idx = distinct_rows(16, 64)
    expected = (acc.astype(np.float32) + table[idx[:, 0]].astype(np.float32)).astype(dtype)
    result = nki.simulate(gather_add)(table, idx, acc)
    np.testing.assert_array_equal(result.view(np.uint8), expected.view(np.uint8))


def test_a_repeated_index_is_a_hazard_at_the_kernel_line_and_writes_nothing():
    """dma_compute requires unique indices: two partitions adding into one row would race."""
    table = RNG.standard_normal((64, 32)).astype(np.float32)
    idx = distinct_rows(16, 64)
    idx[5] = idx[2]
    before = table.copy()
    with pytest.raises(HazardError, match=LINE + r"scatter_add: .*more than once; dma_compute needs unique"):
        nki.simulate(scatter_add)(table, idx, RNG.standard_normal((16, 32)).astype(np.float32))
    np.testing.assert_array_equal(table, before)


def test_out_of_bounds_rows_raise_or_are_skipped_as_oob_mode_says():
    table = RNG.standard_normal((64, 32)).astype(np.float32)
    acc = RNG.standard_normal((16, 32)).astype(np.float32)
    idx = distinct_rows(16, 64)
    idx[3] = 64

    def gather(t, i, a, mode):
        tile = on_chip(a)
        nisa.dma_compute(dst=tile, srcs=[rows_of(t, on_chip(i), 16), tile], reduce_op=nl.add, oob_mode=mode)
        return to_hbm(tile)
    with pytest.raises(HazardError, match=LINE + "gather: .*reaches element 2048"):
        nki.simulate(gather)(table, idx, acc, nisa.oob_mode.error)
    result = nki.simulate(gather)(table, idx, acc, nisa.oob_mode.skip)
    expected = acc + table[np.minimum(idx[:, 0], 63)]
    expected[3] = acc[3]  # the skipped row keeps its value
    np.testing.assert_array_equal(result, expected)


def misuse(case):
    def kernel(table, idx, values):
        data, index = on_chip(values), on_chip(idx)
        dst = rows_of(table, index, 16)
        if case == "three sources":
            nisa.dma_compute(dst=dst, srcs=[dst, data, data], reduce_op=nl.add)
        elif case == "not unique":
            nisa.dma_compute(dst=dst, srcs=[dst, data], reduce_op=nl.add, unique_indices=False)
        elif case == "no dst source":
            nisa.dma_compute(dst=dst, srcs=[data, data], reduce_op=nl.add)
        elif case == "sbuf indirect":
            other = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
            picked = rows_of(other, index, 16)
            nisa.dma_compute(dst=data, srcs=[picked, data], reduce_op=nl.add)
        elif case == "hbm data":
            nisa.dma_compute(dst=dst, srcs=[dst, values], reduce_op=nl.add)
        elif case == "junk source":
            nisa.dma_compute(dst=dst, srcs=[dst, None], reduce_op=nl.add)
    return kernel


@pytest.mark.parametrize("case,error,match", [
    ("three sources", ArgumentError, "exactly 2 srcs, not 3"),
    ("not unique", UnsupportedError, "requires unique_indices=True"),
    ("no dst source", ArgumentError, "one source that is dst's own access"),
    ("sbuf indirect", ArgumentError, "must be in HBM"),
    ("hbm data", ArgumentError, "must be an SBUF tile"),
    ("junk source", ArgumentError, r"srcs\[1\] is None; it must be a tile"),
])
@pytest.mark.parametrize("values_too", [True, False])
def test_misuse_is_refused_at_the_kernel_line_in_value_and_trace_runs(case, error, match, values_too):
    table = np.zeros((64, 32), np.float32)
    args = (table, distinct_rows(16, 64), np.ones((16, 32), np.float32))
    with pytest.raises(error, match=LINE + "kernel: .*" + match):
        if values_too:
            nki.simulate(misuse(case))(*args)
        else:
            nki.trace(misuse(case), *args)


# --- the old API -------------------------------------------------------------------------------
ol, oisa = old.language, old.isa


@old.jit
def atomic_add(table, idx, values):
    out = ol.ndarray(table.shape, dtype=table.dtype, buffer=ol.shared_hbm)
    ol.store(out, ol.load(table))
    rows = ol.load(idx)
    ix = ol.arange(values.shape[1])[None, :]
    ol.atomic_rmw(out[rows, ix], value=ol.load(values), op=np.add)
    return out


def test_atomic_rmw_adds_repeated_rows_one_after_another():
    """atomic_rmw is atomic: rows picked twice get both values, added in partition order."""
    table = RNG.standard_normal((32, 16)).astype(BF16)
    values = RNG.standard_normal((24, 16)).astype(BF16)
    idx = RNG.integers(0, 8, (24, 1)).astype(np.int32)  # many repeats
    expected = table.copy()
    for p, row in enumerate(idx[:, 0]):
        expected[row] = (expected[row].astype(np.float32) + values[p].astype(np.float32)).astype(BF16)
    result = atomic_add(table, idx, values)
    np.testing.assert_array_equal(result.view(np.uint16), expected.view(np.uint16))


def test_old_dma_copy_with_dst_rmw_op_adds_into_dst():
    @old.jit
    def add_into_rows(table, idx, values):
        out = ol.ndarray(table.shape, dtype=table.dtype, buffer=ol.shared_hbm)
        ol.store(out, ol.load(table))
        ix = ol.arange(values.shape[1])[None, :]
        oisa.dma_copy(dst=out[ol.load(idx), ix], src=ol.load(values), dst_rmw_op=np.add)
        plain = ol.ndarray(values.shape, dtype=values.dtype, buffer=ol.shared_hbm)
        ol.store(plain, ol.load(values))
        oisa.dma_copy(dst=plain, src=ol.load(values), dst_rmw_op=np.add)  # dst += src, no index tile
        return out, plain
    table = RNG.standard_normal((32, 16)).astype(np.float32)
    values = RNG.standard_normal((8, 16)).astype(np.float32)
    idx = distinct_rows(8, 32)
    expected = table.copy()
    expected[idx[:, 0]] += values
    out, plain = add_into_rows(table, idx, values)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(plain, values + values)


def test_old_read_modify_writes_refuse_other_ops():
    @old.jit
    def multiply_rows(table, idx, values):
        out = ol.ndarray(table.shape, dtype=table.dtype, buffer=ol.shared_hbm)
        ix = ol.arange(values.shape[1])[None, :]
        ol.atomic_rmw(out[ol.load(idx), ix], value=ol.load(values), op=np.multiply)
        return out
    with pytest.raises(UnsupportedError, match=LINE + r"multiply_rows: .*supports op=np\.add only"):
        multiply_rows(np.zeros((32, 16), np.float32), distinct_rows(8, 32), np.ones((8, 16), np.float32))
