"""The fast paths of instruction issue give exactly what the general paths give.

`NkiTensor.__getitem__` tries `_plain_index` (ints and step-less slices) before the general
`_index`; every key must come out the same either way: same view, or the same error and message.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import hardware
from trnsim.core.machine import Launch, NeuronCore
from trnsim.errors import ShapeError, TrnsimError
from trnsim.nki import backend, dtypes
from trnsim.nki.isa import VirtualRegister
from trnsim.nki.tensor import DynSlice

SHAPES = {dtypes.SBUF: (8, 6, 10), dtypes.PSUM: (4, 16), dtypes.HBM: (5, 7, 3, 2)}


@pytest.fixture(scope="module")
def tensors():
    """One tensor per memory on a trace-only trn2 core (registers have no values there)."""
    running = NeuronCore(hardware.core("trn2"), Launch("trn2", 1), with_values=False, strict=False)
    token = backend.activate(running)
    made = [backend.new_tensor(shape, "float32", buffer) for buffer, shape in SHAPES.items()]
    # A view with an offset and a negative stride, so the arithmetic starts somewhere.
    made.append(made[0][1:7, ::-1, 2:9])
    yield made
    backend.deactivate(token)


def _outcome(index):
    try:
        view = index()
    except Exception as error:  # noqa: BLE001 - both paths must fail alike, whatever the error
        return "error", type(error), str(error)
    return "view", type(view), view.storage, view.shape, view.strides, view.offset, view.element


BOUND = st.integers(-12, 12)
PLAIN = st.one_of(BOUND, st.builds(slice, st.none() | BOUND, st.none() | BOUND))
ANY = st.one_of(
    PLAIN,
    st.builds(slice, st.none() | BOUND, st.none() | BOUND, st.sampled_from([None, 1, 2, 3, -1, -2])),
    st.just(Ellipsis),
    st.builds(DynSlice, st.integers(-2, 9), st.integers(0, 6), st.sampled_from([1, 2])),
    st.builds(np.int64, BOUND),
)


@settings(max_examples=400, deadline=None)
@given(which=st.integers(0, len(SHAPES)), key=st.lists(ANY, max_size=5), bare=st.booleans())
def test_getitem_matches_the_general_path(tensors, which, key, bare):
    tensor = tensors[which]
    key = key[0] if bare and len(key) == 1 else tuple(key)
    keys = key if isinstance(key, tuple) else (key,)
    assert _outcome(lambda: tensor[key]) == _outcome(lambda: tensor._index(keys))


@settings(max_examples=200, deadline=None)
@given(which=st.integers(0, len(SHAPES)), key=st.lists(PLAIN, max_size=4))
def test_plain_keys_in_bounds_take_the_fast_path(tensors, which, key):
    tensor = tensors[which]
    keys = tuple(key)
    fits = len(keys) <= len(tensor.shape) and all(
        -size <= k < size if isinstance(k, int) else
        all(end is None or end <= size for end in (k.start, k.stop))
        for k, size in zip(keys, tensor.shape, strict=False))
    fast = tensor._plain_index(keys)
    assert (fast is not None) == fits
    if fits:
        general = tensor._index(keys)
        assert (fast.shape, fast.strides, fast.offset) == (general.shape, general.strides, general.offset)
        assert fast.region() == general.region()


def test_out_of_bounds_and_registers_raise_as_before(tensors):
    sbuf = tensors[0]
    with pytest.raises(TrnsimError, match=r"index 8 is out of bounds for dim 0 .*\(size 8\)"):
        sbuf[8]
    with pytest.raises(TrnsimError, match=r"index slice\(None, 11, None\) is out of bounds for dim 2"):
        sbuf[:, :, :11]
    with pytest.raises(ShapeError, match="4 indices for a 3-d tensor"):
        sbuf[0, 0, 0, 0]
    with pytest.raises(TrnsimError, match="trace_only runs have no values"):
        sbuf[:, VirtualRegister(2)]


def test_integer_index_keeps_the_partition_dim_on_chip_only(tensors):
    sbuf, _, hbm = tensors[:3]
    assert sbuf[3].shape == (1, 6, 10) and sbuf[-1, 2].shape == (1, 10)
    assert hbm[3].shape == (7, 3, 2) and hbm[-1, 2].shape == (3, 2)
    assert sbuf[2:5, 1].offset == 2 * 60 + 10


def test_indirect_views_still_refuse_slicing(tensors):
    hbm = tensors[2]
    indirect = hbm.ap([[6, 5], [1, 6]], vector_offset=tensors[0][0:5, 0, 0:1], indirect_dim=0)
    with pytest.raises(ShapeError, match="cannot be viewed further"):
        indirect[0:2]
