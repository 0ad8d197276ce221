"""The fast paths of instruction issue give exactly what the general paths give.

`NkiTensor.__getitem__` tries `_plain_index` (ints and step-less slices) before the general
`_index`; every key must come out the same either way: same view, or the same error and message.
Sub-views are remembered per tensor, and kernel lines per code position: both must stay right.
"""

import inspect
import pathlib
import re
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import hardware
from trnsim.core.machine import Launch, NeuronCore
from trnsim.errors import KernelError, ShapeError, TrnsimError
from trnsim.nki import backend, dtypes
from trnsim.nki.isa import VirtualRegister
from trnsim.nki.tensor import _VIEWS_KEPT, DynSlice

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
    st.builds(lambda value: VirtualRegister(value), st.integers(0, 5)),  # read raises: trace only
    st.builds(lambda value: slice(VirtualRegister(value), None), st.integers(0, 5)),
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


def test_a_tuple_subclass_key_is_a_tuple_of_indices(tensors):
    class Key(tuple):
        pass
    sbuf = tensors[0]
    assert sbuf[Key((2, slice(1, 3)))] is sbuf[2, 1:3]
    assert sbuf[Key((2, slice(1, 3)))].shape == (1, 2, 10)


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


def test_a_sub_view_is_made_once_and_keeps_its_region(tensors):
    sbuf = tensors[0]
    first = sbuf[:, 2, 3:7]
    again = sbuf[:, -4, 3:-3]  # the same window, spelled differently
    assert again is first and again.region() is first.region()
    assert sbuf[:, 2, 3:8] is not first and sbuf[:, 2, 3:8].shape == (8, 5)


def test_a_tensor_remembers_a_bounded_number_of_sub_views(tensors):
    flat = backend.new_tensor((_VIEWS_KEPT + 10,), "float32", dtypes.HBM)
    views = [flat[i:i + 1] for i in range(_VIEWS_KEPT + 10)]
    assert [v.offset for v in views] == list(range(_VIEWS_KEPT + 10))
    assert len(flat._views) == _VIEWS_KEPT
    assert flat[3:4] is views[3] and flat[_VIEWS_KEPT + 5:_VIEWS_KEPT + 6] is not views[-5]


def _copies_from_two_lines(x):
    """Three tensor_copy instructions from one line in a loop, and one from the line after."""
    tile = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    for _ in range(3):
        nisa.tensor_copy(dst=tile,
                         src=tile)  # a call that spans two lines is reported at its first
    nisa.tensor_copy(dst=tile, src=tile)
    out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def test_kernel_lines_stay_exact_when_cached():
    source, first = inspect.getsourcelines(_copies_from_two_lines)
    loop_line = first + next(i for i, text in enumerate(source) if "src=tile)  #" in text) - 1
    trace = nki.trace(_copies_from_two_lines, np.zeros((4, 8), np.float32))
    copies = [ins.where for ins in trace if ins.opcode.value == "tensor_copy"]
    assert [w.line for w in copies] == [loop_line] * 3 + [loop_line + 2]
    assert {w.function for w in copies} == {"_copies_from_two_lines"}
    assert copies[0] is copies[1]  # one SourceLoc per code position
    assert all(w.file == __file__ for w in copies)


def test_errors_still_name_the_kernel_line():
    def bad(x):
        tile = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.psum)
        line = inspect.currentframe().f_lineno + 1
        nisa.tensor_tensor(dst=tile, data1=acc, data2=acc, op=nl.add)
        return line
    with pytest.raises(KernelError, match="reads at most one input from PSUM") as caught:
        nki.trace(bad, np.zeros((4, 8), np.float32))
    assert caught.value.where.line > 0 and caught.value.where.file == __file__
    assert caught.value.where.function == "bad"


def test_the_shallowest_callers_still_find_the_kernel_line():
    """kernel_line starts at its caller's caller: a kernel calling the back end itself is one frame
    above that."""
    def direct(x):
        tile = backend.new_tensor((4, 8), "float32", dtypes.SBUF)
        backend.issue(nisa.Opcode.MEMSET, tile, (), {"value": 0.0})
        return x
    (memset,) = nki.trace(direct, np.zeros((4, 8), np.float32))
    made_at = inspect.getsourcelines(direct)[1] + 1
    assert memset.where.line == made_at + 1 and memset.where.function == "direct"
    assert memset.outputs[0].name == f"direct:{made_at}"


def test_the_measuring_snippet_in_the_docs_runs(monkeypatch):
    root = pathlib.Path(__file__).resolve().parents[2]
    doc = root / "docs" / "emulator-speed.md"
    (snippet,) = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "path", list(sys.path))
    scope: dict = {}
    exec(compile(snippet, str(doc), "exec"), scope)
    trace = scope["matmul_blocked"].last_trace
    assert len(trace) == 1124 and trace.counts()[nisa.Opcode.MATMUL] == 1024
