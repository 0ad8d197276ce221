"""API features that AWS's published NKI kernels rely on (nki-library, nki-moe, the SDK examples),
each exercised by a small kernel written here and compared against numpy. The published kernels
themselves are not in the repository; docs/published-kernels.md lists them and how they fared."""

import ml_dtypes
import numpy as np
import pytest
from kernel_helpers import on_chip, to_hbm

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ShapeError

RNG = np.random.default_rng(11)


# --- tensor_reduce: real dim indices, trailing axes, dst checked --------------------------------
def test_grouped_argmax_reduces_innermost_axis_and_broadcasts_back():
    """Per row, split into groups; the max of each group and the index where it sits, found with a
    3-D reduce, a broadcast view of the maxima, an equality mask and a second reduce."""
    groups, width = 4, 16
    values = RNG.permutation(np.arange(8 * groups * width, dtype=np.float32)).reshape(8, groups * width)
    positions = np.tile(np.arange(groups * width, dtype=np.float32), (8, 1))

    def kernel(v, pos):
        data, where = on_chip(v), on_chip(pos)
        cube = (8, groups, width)
        peak = nl.ndarray((8, groups), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=peak, op=nl.maximum, data=data.reshape(cube), axis=2)
        hit = nl.ndarray(cube, dtype=nl.uint8, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=hit, data1=data.reshape(cube), op=nl.equal,
                           data2=peak.reshape((8, groups, 1)).broadcast(2, width))
        picked = nl.ndarray((8, groups * width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=picked, data1=hit.reshape((8, groups * width)), data2=where, op=nl.multiply)
        index = nl.ndarray((8, groups), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=index, op=nl.maximum, data=picked.reshape(cube), axis=2)
        return to_hbm(peak), to_hbm(index)

    peak, index = nki.simulate(kernel)(values, positions)
    grouped = values.reshape(8, groups, width)
    np.testing.assert_array_equal(peak, grouped.max(axis=2))
    expected = grouped.argmax(axis=2) + np.arange(groups) * width
    np.testing.assert_array_equal(index, expected.astype(np.float32))


def _reduce_kernel(axis, dst_shape):
    def kernel(x):
        out = nl.ndarray(dst_shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=out, op=nl.add, data=on_chip(x), axis=axis)
        return to_hbm(out)
    return kernel


def test_tensor_reduce_refuses_a_middle_axis_with_the_kernel_line():
    """NKI >= 0.3 counts axes as real dims and reduces trailing ones; the pre-0.3 habit of axis=1
    meaning 'innermost' must fail loudly rather than sum the wrong dim."""
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    with pytest.raises(ShapeError, match=r"test_published_api\.py:\d+.*axis=1 on a 3-D tile \[4, 3, 5\]"):
        nki.simulate(_reduce_kernel(1, (4, 5)))(x)


def test_tensor_reduce_refuses_a_dst_of_the_wrong_size():
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    with pytest.raises(ShapeError, match=r"dst \[4, 5\] does not hold .* 4 partitions x 3 values"):
        nki.simulate(_reduce_kernel(2, (4, 5)))(x)


@pytest.mark.parametrize("axis, keepdims", [(1, False), ((1, 3), True), (2, False)])
def test_language_reductions_over_any_free_axes(axis, keepdims):
    """nl.sum/nl.max may name middle axes; they lower to a reduce over a permuted view."""
    x = RNG.standard_normal((8, 3, 4, 5)).astype(np.float32)

    def kernel(a):
        return to_hbm(nl.sum(on_chip(a), axis=axis, keepdims=keepdims)), to_hbm(nl.max(on_chip(a), axis=axis))

    total, peak = nki.simulate(kernel)(x)
    np.testing.assert_allclose(total, x.sum(axis=axis, keepdims=keepdims), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(peak, x.max(axis=axis))


# --- scans carried across tiles (cumulative sums, linear recurrences) ----------------------------
def test_scan_carries_the_last_column_into_the_next_tile():
    """A long row scanned in two halves: the second half starts from the first half's last value."""
    decay = RNG.uniform(0.5, 1.0, (100, 64)).astype(np.float32)
    data = RNG.standard_normal((100, 64)).astype(np.float32)

    def kernel(d, x):
        carry = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=carry, value=0.0)
        out = nl.ndarray((100, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        for half in range(2):
            cols = slice(32 * half, 32 * half + 32)
            d_t, x_t = on_chip(d[:, cols]), on_chip(x[:, cols])
            r_t = nl.ndarray((100, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=r_t, data0=d_t, data1=x_t, initial=carry[0:100, 0:1],
                                    op0=nl.multiply, op1=nl.add)
            nisa.tensor_copy(dst=carry[0:100, 0:1], src=r_t[:, 31:32])
            nisa.dma_copy(dst=out[:, cols], src=r_t)
        return out

    got = nki.simulate(kernel)(decay, data)
    state, expected = np.zeros(100), np.empty((100, 64))
    for t in range(64):
        state = decay[:, t] * state + data[:, t]
        expected[:, t] = state
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# --- one row to every partition with nc_stream_shuffle --------------------------------------------
def test_stream_shuffle_copies_one_partition_to_each_quadrant():
    """A [1, F] weight row reaches 128 partitions through four 32-partition shuffles of partition 0."""
    row = RNG.standard_normal((1, 48)).astype(ml_dtypes.bfloat16)

    def kernel(w):
        src = on_chip(w)
        wide = nl.ndarray((128, 48), dtype=w.dtype, buffer=nl.sbuf)
        for quadrant in range(4):
            nisa.nc_stream_shuffle(src=src[0:1, :], dst=wide[32 * quadrant:32 * quadrant + 32, :],
                                   shuffle_mask=[0] * 32)
        return to_hbm(wide)

    got = nki.simulate(kernel)(row)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), np.tile(row, (128, 1)).view(np.uint16))


# --- gather, add, scatter back through vector_offset on an input tensor -------------------------
def test_indirect_gather_add_scatter_updates_the_input_in_place():
    """table[rows[i], :] += delta[i] with a row-index tile; the kernel returns the input it wrote."""
    table = RNG.standard_normal((40, 24)).astype(np.float32)
    rows = RNG.permutation(40)[:16].astype(np.int32)
    delta = RNG.standard_normal((16, 24)).astype(np.float32)

    def kernel(t, r, dlt):
        index = nl.ndarray((16, 1), dtype=r.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=index, src=r.ap(pattern=[[1, 16], [1, 1]], offset=0))
        picked = nl.ndarray((16, 24), dtype=t.dtype, buffer=nl.sbuf)
        view = t.ap(pattern=[[24, 16], [1, 24]], offset=0, vector_offset=index, indirect_dim=0)
        nisa.dma_copy(dst=picked, src=view)
        summed = nl.ndarray((16, 24), dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=summed, data1=picked, data2=on_chip(dlt), op=nl.add)
        nisa.dma_copy(dst=t.ap(pattern=[[24, 16], [1, 24]], offset=0, vector_offset=index, indirect_dim=0),
                      src=summed)
        return t

    updated = table.copy()
    returned = nki.simulate(kernel)(updated, rows, delta)
    expected = table.copy()
    expected[rows] += delta
    np.testing.assert_allclose(returned, expected, rtol=1e-6)
    np.testing.assert_allclose(updated, expected, rtol=1e-6)


# --- integer bit patterns through bitwise ops (radix selection on float bits) -----------------
def test_bitwise_results_keep_every_bit_of_large_int32_values():
    """OR-ing bits into a float's int32 pattern (values near 2**30) must not detour through fp32,
    which would round away the low bits; the pattern then reads back as the float it encodes."""
    floats = RNG.uniform(1.0, 2.0, (16, 8)).astype(np.float32)
    patterns = floats.view(np.int32)
    high, low = patterns & ~np.int32(0xFF), patterns & np.int32(0xFF)

    def kernel(h, lo):
        hi_t, lo_t = on_chip(h), on_chip(lo)
        joined = nl.ndarray((16, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=joined, data1=hi_t, data2=lo_t, op=nl.bitwise_or)
        masked = nl.ndarray((16, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=masked, data=joined, op0=nl.bitwise_and, operand0=lo_t[:, 0:1])
        folded = nl.ndarray((16, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=folded, op=nl.bitwise_or, data=joined, axis=1)
        as_float = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=as_float, src=joined.view(nl.float32))
        return to_hbm(joined), to_hbm(masked), to_hbm(folded), to_hbm(as_float)

    joined, masked, folded, as_float = nki.simulate(kernel)(high, low)
    np.testing.assert_array_equal(joined, patterns)
    np.testing.assert_array_equal(masked, patterns & low[:, 0:1])
    np.testing.assert_array_equal(folded[:, 0], np.bitwise_or.reduce(patterns, axis=1))
    np.testing.assert_array_equal(as_float, floats)


# --- import paths the published kernels use ------------------------------------------------------
def test_isa_enums_import_from_nki_isa_constants():
    """nki-library modules write `from nki.isa.constants import dge_mode, oob_mode`."""
    from trnsim.nki import compat
    was_enabled = compat.is_enabled()
    with compat.enabled():
        from nki.isa.constants import dge_mode, engine, oob_mode  # noqa: PLC0415
        assert dge_mode is nisa.dge_mode and oob_mode is nisa.oob_mode and engine is nisa.engine
    assert compat.is_enabled() == was_enabled
    assert nisa.constants.oob_mode is nisa.oob_mode  # trnsim.nki.isa.constants, with or without aliases
