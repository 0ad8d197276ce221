"""The front end's cheap paths give what the general ones give: indexing as numpy indexes, a
tile's cached trace region equal to a freshly computed one, every engine name resolved."""

import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core.isa import Engine, Opcode
from trnsim.core.memory import View
from trnsim.errors import ArgumentError, HazardError, ShapeError, UnsupportedError
from trnsim.nki import backend


def _index(size: int):
    """One index for a dim of `size`: an int (negative too) or a slice, always in bounds."""
    bound = st.none() | st.integers(-size, size)
    steps = st.none() | st.integers(1, 3) | st.integers(-3, -1)
    return st.integers(-size, size - 1) | st.builds(slice, bound, bound, steps)


@st.composite
def _shape_and_key(draw):
    """A shape and an index for some of its dims: trailing dims left out, or a run of dims
    replaced by an Ellipsis."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    key = tuple(draw(_index(size)) for size in shape)
    start = draw(st.integers(0, len(shape)))
    end = draw(st.integers(start, len(shape)))
    if draw(st.booleans()):
        return shape, key[:start] + (Ellipsis,) + key[end:]
    return shape, key[:max(start, 1)]


def _kept(index: int) -> slice:
    return slice(index, index + 1 if index != -1 else None)


def _numpy_key(key, ndim: int, on_chip: bool):
    """NKI keeps dim 0 of an on-chip tile under an integer index (size 1), and an on-chip view
    stays 2-D (the last free dim, indexed by an integer, kept at size 1); numpy drops both."""
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (ndim - len(key) + 1) + key[at + 1:]
    if on_chip and key and isinstance(key[0], int):
        key = (_kept(key[0]),) + key[1:]
    kept = sum(not isinstance(k, int) for k in key) + ndim - len(key)
    if on_chip and ndim >= 2 and kept < 2 and len(key) == ndim and isinstance(key[-1], int):
        key = key[:-1] + (_kept(key[-1]),)
    return key


@settings(max_examples=60, deadline=None)
@given(_shape_and_key(), st.booleans())
def test_indexing_matches_numpy(shape_and_key, on_chip):
    shape, key = shape_and_key
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    expected = x[_numpy_key(key, len(shape), on_chip)]
    assume(expected.size > 0)  # an empty view may start past the buffer's end; it has no values

    def kernel(a):
        source = a
        if on_chip:
            source = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=source, src=a)
        expanded = _numpy_key(key, len(shape), on_chip=False)  # the Ellipsis written out
        first = expanded[0] if expanded else None
        if on_chip and isinstance(first, slice) and first.step not in (None, 1) and expected.shape[0] > 1:
            with pytest.raises(UnsupportedError, match="steps through partitions"):
                source[key]  # engines cannot stride in the partition dim
            return nl.ndarray((1,), dtype=a.dtype, buffer=nl.shared_hbm)
        view = source[key]
        assert view.shape == expected.shape
        np.testing.assert_array_equal(view.array(), expected)
        return nl.ndarray((1,), dtype=a.dtype, buffer=nl.shared_hbm)

    nki.simulate(kernel)(x)


@pytest.mark.parametrize("key,kind,message", [
    ((slice(0, 5),), HazardError, re.escape("index slice(0, 5, None) is out of bounds for dim 0")),
    ((1, slice(None), 2), ShapeError, "3 indices for a 2-d tensor"),
    ((-3,), HazardError, "index -3 is out of bounds for dim 0"),
    ((slice(None), slice(1, 9)), HazardError, "for dim 1 .* \\(size 8\\)"),
    ((Ellipsis, 8), HazardError, "index 8 is out of bounds for dim 1"),
    ((nl.ds(6, 3),), HazardError, "out of bounds for dim 0"),
])
def test_bad_index_is_refused_with_the_dim(key, kind, message):
    def kernel(a):
        a[key]

    with pytest.raises(kind, match=message):
        nki.simulate(kernel)(np.zeros((2, 8), np.float32))


def test_cached_region_equals_a_fresh_one_for_every_view():
    seen = []

    def kernel(a):
        tile = nl.ndarray((128, 4, 32), dtype=nl.float32, buffer=nl.sbuf, address=(0, 256))
        nisa.memset(dst=tile, value=0.0)
        views = [tile, tile[:, 1], tile[0:64, :, 8:16], tile[32:64, 2, ::4], tile.permute((0, 2, 1)),
                 a, a[1:3], a[:, ::2]]
        for view in views:
            first = view.region()
            assert view.region() is first  # made once per view
            assert first == View.region(view)  # and equal to what View computes from scratch
            seen.append(first)
        for _ in range(3):  # a tile that is the operand of many instructions
            nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0)
        trace = backend.core().trace
        assert all(ins.outputs[0] == View.region(tile) for ins in trace[-3:])
        out = nl.ndarray((4, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    nki.simulate(kernel)(np.zeros((4, 8), np.float32))
    assert len(set(seen)) == len(seen)  # no two different views share a region
    assert seen[2].partition_count == 64 and seen[3].partition_start == 32
    assert seen[1].address_bytes == seen[0].address_bytes == 256


def test_every_engine_spelling_resolves_to_its_engine():
    copy = Opcode.TENSOR_COPY
    for engine in Engine:
        assert backend._engine(engine, copy) is engine
        assert backend._engine(engine.value, copy) is engine
        assert backend._engine(getattr(nisa.engine, engine.value), copy) is engine
    for none in (None, "unknown", nisa.engine.unknown):
        assert backend._engine(none, copy) is None
    with pytest.raises(ArgumentError, match="engine='bogus'; it must be one of"):
        backend._engine("bogus", copy)


@pytest.mark.parametrize("pattern,offset,message", [
    ([[32, 256], [1, 32]], 0, "partition dimension of .* is 256 \\(partitions 0..255\\)"),
    ([[16, 64], [1, 16]], 100 * 64, "is 64 \\(partitions 100..163\\)"),
    ([[64, 32], [1, 64]], 16 * 64, "starts at partition 16 with 32 partitions"),
])
def test_partition_ranges_are_checked_from_any_start(pattern, offset, message):
    """The check skips the partition rules only for accesses that start at partition 0 and fit."""
    def kernel(a):
        tile = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=tile, value=0.0)
        view = tile.ap(pattern, offset=offset)
        nisa.tensor_scalar(dst=view, data=view, op0=nl.add, operand0=1.0)

    with pytest.raises(ShapeError, match=message):
        nki.simulate(kernel, target="trn2")(np.zeros(1, np.float32))


def test_on_chip_views_stay_two_dimensional_as_the_language_guide_asserts():
    """t[:, 0, 10] of a [64, 64, 64] tile was [64] (aws-neuron-sdk nki-language-guide.rst, "Tensor
    Indexing", asserts [64, 1]); so nki-library's attention_cte with a sliding window, which then
    indexes such a view with [:n, :1], was refused."""
    def kernel(a):
        t = nl.ndarray((64, 64, 64), dtype=nl.float32, buffer=nl.sbuf)
        assert t[0, 0, 10].shape == (1, 1) and t[:, 0].shape == (64, 64) and t[:, 0, 10].shape == (64, 1)
        s = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        assert s[:128, 2][:64, :1].shape == (64, 1)
        h = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        assert h[:, 3].shape == (64,)  # HBM tensors drop the dim, as numpy does
        return h
    nki.trace(nki.jit(kernel), nki.TensorSpec((1,), "float32"), target="trn2")
