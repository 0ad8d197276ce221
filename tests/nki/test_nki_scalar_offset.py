"""`.ap(scalar_offset=...)`: a runtime index along `indirect_dim` (an int, a register or a 1x1
tile), and `nki.tensor` trace-time constants for `nl.shared_constant`, and `nki.dtype`."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ShapeError
from trnsim.nki import tensor as ntensor

TABLE = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)


@nki.jit
def pick_row(table, row_index):
    """Copy row `row_index[0, 0]` of an HBM table, the index read from a tile at run time."""
    index = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=index, src=row_index)
    row = nl.ndarray((1, 16), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=table.ap([[16, 1], [1, 16]], scalar_offset=index, indirect_dim=0))
    out = nl.ndarray((1, 16), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=row)
    return out


@pytest.mark.parametrize("row", [0, 5, 7])
def test_a_tile_scalar_offset_selects_a_row(row):
    out = nki.simulate(pick_row, target="trn2")(TABLE, np.array([[row]], np.int32))
    np.testing.assert_array_equal(out, TABLE[row:row + 1])


def test_an_int_scalar_offset_steps_along_indirect_dim():
    @nki.jit
    def column(table):
        out = nl.ndarray((8, 1), dtype=table.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((8, 1), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table.ap([[16, 8], [1, 1]], scalar_offset=3, indirect_dim=1))
        nisa.dma_copy(dst=out, src=tile)
        return out
    np.testing.assert_array_equal(nki.simulate(column, target="trn2")(TABLE), TABLE[:, 3:4])


def test_a_scalar_offset_tile_must_hold_one_value():
    @nki.jit
    def wide(table):
        index = nl.zeros((1, 2), dtype=nl.int32)
        table.ap([[16, 1], [1, 16]], scalar_offset=index, indirect_dim=0)
    with pytest.raises(ShapeError, match="1x1 tile"):
        nki.simulate(wide, target="trn2")(TABLE)


def test_trace_time_constants_feed_shared_constant():
    @nki.jit
    def constants():
        eye = nl.shared_constant(ntensor.identity(4, dtype=nl.int8), dtype=nl.float32)
        ramp = nl.shared_constant(ntensor.arange(4, dtype=nl.int32), dtype=nl.float32)
        return eye, ramp
    eye, ramp = nki.simulate(constants, target="trn2")()
    np.testing.assert_array_equal(eye, np.eye(4))
    np.testing.assert_array_equal(ramp, np.arange(4))
    assert ntensor.zeros((2, 3), dtype=nl.bfloat16).shape == (2, 3)


def test_nki_dtype_annotates_nl_dtypes():
    """`nki.dtype` exists for annotations such as `dtype: nki.dtype = nl.float32`."""
    assert all(isinstance(d, nki.dtype) for d in (nl.float32, nl.bfloat16, nl.float8_e4m3, nl.int32))


def _read(table, pattern, dst_shape, **offsets):
    """Simulate a kernel that DMAs `table.ap(pattern, **offsets)` through SBUF into an output."""
    @nki.jit
    def read(table, *index):
        index_tile = None
        if index:
            index_tile = nl.ndarray(index[0].shape, dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=index_tile, src=index[0])
        view = table.ap(pattern, **{k: index_tile if v is None else v for k, v in offsets.items()})
        tile = nl.ndarray(dst_shape, dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=view)
        out = nl.ndarray(dst_shape, dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out
    return read


@pytest.mark.parametrize("pattern, expected", [
    ([[0, 1], [1, 16]], TABLE[5:6]),  # the pattern's dim 0 stride (0) is not the table's (16)
    ([[1, 16], [16, 2]], TABLE[5:7].T),  # the pattern reorders the dims
])
def test_a_scalar_offset_steps_by_the_tensors_own_stride(pattern, expected):
    """NKI scales scalar_offset by the stride of dim `indirect_dim` of the tensor, not of the pattern."""
    out = nki.simulate(_read(TABLE, pattern, expected.shape, scalar_offset=5, indirect_dim=0), target="trn2")
    np.testing.assert_array_equal(out(TABLE), expected)


def test_vector_offsets_step_by_the_tensors_own_stride():
    """Gather the first half of rows 5, 2, 7, 0: the pattern's dim 0 stride (8) is the half row's
    length, the table's row stride is 16."""
    rows = np.array([[5], [2], [7], [0]], np.int32)
    kernel = _read(TABLE, [[8, 4], [1, 8]], (4, 8), vector_offset=None, indirect_dim=0)
    np.testing.assert_array_equal(nki.simulate(kernel, target="trn2")(TABLE, rows), TABLE[[5, 2, 7, 0], :8])


def test_indirect_dim_must_be_a_dim_of_the_tensor():
    kernel = _read(TABLE, [[16, 1], [1, 16], [1, 1]], (1, 16, 1), scalar_offset=1, indirect_dim=2)
    with pytest.raises(ShapeError, match="indirect_dim=2 is not a dim of the 2-d tensor"):
        nki.simulate(kernel, target="trn2")(TABLE)


def test_vector_offset_needs_one_index_per_step():
    kernel = _read(TABLE, [[16, 4], [1, 16]], (4, 16), vector_offset=None, indirect_dim=0)
    with pytest.raises(ShapeError, match="at least 4 indices"):
        nki.simulate(kernel, target="trn2")(TABLE, np.zeros((2, 1), np.int32))


@pytest.mark.parametrize("count", [0, -1, 2.5])
def test_pattern_counts_must_be_positive_integers(count):
    with pytest.raises(ShapeError, match="every dim must be an integer"):
        nki.simulate(_read(TABLE, [[16, count], [1, 16]], (1, 16)), target="trn2")(TABLE)
