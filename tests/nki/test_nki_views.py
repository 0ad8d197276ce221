"""NkiTensor views: slicing, permute, reshape, broadcast, rearrange, ap, view(dtype) — no copies."""

import ml_dtypes
import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import HazardError, ShapeError, UnsupportedError

X = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)


def copy_view(make_view, x=X, out_shape=None):
    """DMA the view of the HBM input into a fresh output of the view's shape."""
    def kernel(a):
        view = make_view(a)
        out = nl.ndarray(view.shape, dtype=view.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=view)
        return out
    return nki.simulate(kernel)(x)


@pytest.mark.parametrize("make,expect", [
    (lambda a: a[1], lambda x: x[1]),
    (lambda a: a[:, 2:5, ::2], lambda x: x[:, 2:5, ::2]),
    (lambda a: a[..., 3], lambda x: x[..., 3]),
    (lambda a: a[:, nl.ds(1, 3), :], lambda x: x[:, 1:4, :]),
    (lambda a: a.permute((2, 0, 1)), lambda x: x.transpose(2, 0, 1)),
    (lambda a: a.reshape((24, 8)), lambda x: x.reshape(24, 8)),
    (lambda a: a.flatten_dims(start_dim=0, end_dim=1), lambda x: x.reshape(24, 8)),
    (lambda a: a.slice(dim=2, start=2, end=6), lambda x: x[:, :, 2:6]),
    (lambda a: a.select(1, 4), lambda x: x[:, 4]),
    (lambda a: a[0:1].broadcast(0, 3), lambda x: np.broadcast_to(x[0:1], (3, 6, 8))),
    (lambda a: a.expand_dim(1), lambda x: x[:, None]),
    (lambda a: a.rearrange("a b c -> b a c"), lambda x: x.transpose(1, 0, 2)),
    (lambda a: a.rearrange("a b c -> a (b c)"), lambda x: x.reshape(4, 48)),
    (lambda a: a.rearrange("a (b two) c -> a b two c", two=2), lambda x: x.reshape(4, 3, 2, 8)),
    (lambda a: a.ap([[48, 4], [1, 8]], offset=8), lambda x: x.reshape(4, 48)[:, 8:16]),
])
def test_view_matches_numpy(make, expect):
    np.testing.assert_array_equal(copy_view(make), expect(X))


def test_view_dtype_reinterprets_bits():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = copy_view(lambda a: a.view(nl.int32), x)
    np.testing.assert_array_equal(result, x.view(np.int32))
    halves = copy_view(lambda a: a.view(nl.bfloat16), x)
    assert halves.shape == (2, 8) and halves.dtype == ml_dtypes.bfloat16


def test_on_chip_integer_index_keeps_partition_dim():
    def kernel(a):
        tile = nl.load(a)
        assert tile[3].shape == (1, 6, 8)
        assert tile[3, 2].shape == (1, 8)
        assert a[3].shape == (6, 8)
        out = nl.ndarray((1, 6, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile[3])
        return out
    np.testing.assert_array_equal(nki.simulate(kernel)(X), X[3:4])


def test_reshape_that_needs_a_copy_is_refused():
    with pytest.raises(ShapeError, match="needs a copy"):
        copy_view(lambda a: a.permute((1, 0, 2)).reshape((24, 8)))


def test_tensor_attributes():
    def kernel(a):
        tile = nl.ndarray((128, 4), dtype=nl.bfloat16, buffer=nl.sbuf, name="t")
        assert tile.dtype == nl.bfloat16 and np.dtype(ml_dtypes.bfloat16) == tile.dtype
        assert tile.buffer == nl.sbuf and nl.is_sbuf(tile.buffer) and not nl.is_psum(tile.buffer)
        assert (tile.ndim, tile.size, tile.name, tile.is_contiguous()) == (2, 512, "t", True)
        assert tile[:, ::2].get_pattern() == [[4, 128], [2, 2]]
        assert a.buffer == nl.hbm
    nki.simulate(kernel)(X)


def test_indirect_dma_gather_scatter_and_oob_modes():
    table = np.arange(100 * 8, dtype=np.float32).reshape(100, 8)
    rows = np.array([[5], [99], [0], [42]], np.int32)

    def gather(t, idx, mode):
        index = nl.load(idx)
        tile = nl.full((4, 8), -1.0, nl.float32)
        rows_view = t.ap([[8, 4], [1, 8]], vector_offset=index, indirect_dim=0)
        nisa.dma_copy(dst=tile, src=rows_view, oob_mode=mode)
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, tile)
        return out
    gathered = nki.simulate(gather)(table, rows, nisa.oob_mode.error)
    np.testing.assert_array_equal(gathered, table[[5, 99, 0, 42]])
    bad = np.array([[5], [100], [0], [42]], np.int32)
    with pytest.raises(HazardError, match="indirect DMA"):
        nki.simulate(gather)(table, bad, nisa.oob_mode.error)
    skipped = nki.simulate(gather)(table, bad, nisa.oob_mode.skip)
    assert (skipped[1] == -1).all() and (skipped[0] == table[5]).all()

    def scatter(t, idx):
        tile = nl.full((4, 8), 7.0, nl.float32)
        nisa.dma_copy(dst=t.ap([[8, 4], [1, 8]], vector_offset=nl.load(idx), indirect_dim=0), src=tile)
        return t
    updated = table.copy()
    nki.simulate(scatter)(updated, rows)
    expected = table.copy()
    expected[[5, 99, 0, 42]] = 7.0
    np.testing.assert_array_equal(updated, expected)


@pytest.mark.parametrize("make, says", [
    (lambda a: a.reshape((4, 0, 48)), "shape \\[4, 0, 48\\]"),
    (lambda a: a.reshape((-8, -24)), "shape \\[-8, -24\\]"),  # the sizes multiply to 192: no longer enough
    (lambda a: a.reshape((-1, -1)), "at most one dim may be -1"),
    (lambda a: a.reshape((2.5, 4)), "every dim must be an integer"),
    (lambda a: a[:, :, 0:1].broadcast(2, 0), "broadcast\\(2, 0\\)"),
])
def test_views_refuse_empty_and_negative_shapes(make, says):
    with pytest.raises(ShapeError, match=says):
        copy_view(make)


def test_reshape_takes_numpy_integers():
    np.testing.assert_array_equal(copy_view(lambda a: a.reshape((np.int64(8), -1))), X.reshape(8, -1))


@pytest.mark.parametrize("make, says", [
    (lambda a: a[:, [1, 2]], "is not an integer"),                     # no fancy indexing
    (lambda a: a[:, 0:4.0], "is not an integer"),
    (lambda a: a[:, True], "is not an integer"),                       # numpy would add an axis
    (lambda a: a[:, ::0], "step 0"),
    (lambda a: a[:, nl.ds(1, 3, step=0)], "step other than 0"),
    (lambda a: a.select(5, 0), "dim 5 is outside 3 dims"),
    (lambda a: a.slice(5, 0, 2), "dim 5 is outside 3 dims"),
    (lambda a: a.squeeze_dim(9), "dim 9 is outside"),
    (lambda a: a[0:1].broadcast(9, 4), "dim 9 is outside"),
    (lambda a: a.permute((0, 1, 3)), "dim 3 is outside 3 dims"),        # was wrapped to (0, 1, 0)
    (lambda a: a.expand_dim(9), "dim 9 is outside 4 dims"),             # was appended at the end
    (lambda a: a.flatten_dims(5), "dim 5 is outside"),
    (lambda a: a[0:1].broadcast_to((3, 6)), "one size per dim"),        # was left 3-D
    (lambda a: a.ap([16, 128]), "list of \\[stride, count\\] pairs"),
    (lambda a: a.rearrange("a b c"), "'input dims -> output dims'"),
    (lambda a: a.rearrange("a b c -> a b d"), "same dims"),
])
def test_views_refuse_bad_dims_and_keys_by_name(make, says):
    """Each of these used to escape as a raw TypeError/ValueError/IndexError, or to reinterpret the
    dim silently."""
    with pytest.raises(ShapeError, match=says):
        copy_view(make)


def test_a_negative_step_slice_is_bounds_checked_at_both_ends():
    """nl.ds(2, 5, step=-1) on an 8-wide view reaches indices -1 and -2: they were read silently
    from outside the view (here the columns before it)."""
    with pytest.raises(HazardError, match="out of bounds"):
        copy_view(lambda a: a[:, :, 4:8][:, :, nl.ds(2, 5, step=-1)])
    np.testing.assert_array_equal(copy_view(lambda a: a[:, :, nl.ds(4, 5, step=-1)]), X[:, :, 4::-1])


def test_partition_strided_views_of_a_tile_are_refused():
    """An engine instruction cannot stride in the partition dim (NKI architecture guide); the trace
    had described `t[0:128:2]` as partitions 0..63, and `t[::-1]` failed as 128 partitions from 127."""
    def kernel(a):
        tile = nl.ndarray((4, 48), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a.reshape((4, 48)))
        return tile[::-1]
    with pytest.raises(UnsupportedError, match="steps through partitions by -1") as raised:
        nki.simulate(kernel)(X)
    assert raised.value.where is not None and raised.value.where.line > 0
