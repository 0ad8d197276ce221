"""Kernels run with one BLAS thread (the previous setting always comes back), and matmuls write
or add into PSUM through one sgemm call that gives numpy's bits."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core import blas
from trnsim.core.runtime import Runtime


def test_one_blas_thread_sets_and_restores_the_thread_count():
    before = blas.threads()
    with Runtime().one_blas_thread():
        assert blas.threads() == 1
    assert blas.threads() == before


def test_kernels_run_with_one_blas_thread(monkeypatch):
    """The last bits of a GEMM depend on BLAS's thread count: kernels pin it to one."""
    functions = blas._openblas()
    if functions is None:
        pytest.skip("no OpenBLAS to steer")
    seen = []
    original = blas.gemm

    def spy(*args):
        seen.append(functions.get_threads())
        original(*args)
    monkeypatch.setattr(blas, "gemm", spy)
    ones = np.ones((128, 128), np.float32)
    nki.simulate(square)(ones)
    assert seen == [1, 1]


@nki.jit
def square(a):
    """Two matmuls into two PSUM tiles (deferred: both GEMMs run on workers)."""
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.load(a)
    for half in range(2):
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=tile, moving=tile)
        result = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        nl.store(out[:, half * 128:(half + 1) * 128], result)
    return out


def _operands(rng):
    """Strided [K, M] / [K, N] windows of larger arrays and an [M, N] window to write, as PSUM
    tiles and SBUF blocks are."""
    stationary = rng.standard_normal((128, 6, 300), dtype=np.float32)[:, 2, 10:138]
    moving = rng.standard_normal((128, 4, 700), dtype=np.float32)[:, 1, 5:517]
    out = np.zeros((200, 600), np.float32)[10:138, 20:532]
    return stationary, moving, out


@pytest.mark.parametrize("add", [False, True])
def test_gemm_writes_or_adds_the_same_bits_as_numpy(add):
    stationary, moving, out = _operands(np.random.default_rng(3))
    out[...] = np.float32(0.1)
    expected = np.add(out, stationary.T @ moving) if add else stationary.T @ moving
    blas.gemm(stationary, moving, out, add)
    assert np.array_equal(out, expected)


def test_gemm_falls_back_to_numpy_for_layouts_blas_cannot_take():
    stationary, moving, _ = _operands(np.random.default_rng(4))
    out = np.zeros((512, 128), np.float32).T  # column-major window: no row-major leading dimension
    blas.gemm(stationary, moving, out, False)
    assert np.array_equal(out, stationary.T @ moving)
    assert blas._blas_rows(out) is None and blas._blas_rows(stationary) == 6 * 300


def test_describe_names_the_library_and_its_kernels():
    text = blas.describe()
    if blas._openblas() is None:
        assert text.startswith("not OpenBLAS")
    else:
        assert text.startswith("OpenBLAS") and "  " not in text


def test_a_queued_gemm_is_made_later_with_the_same_bits():
    stationary, moving, out = _operands(np.random.default_rng(5))
    now = np.zeros_like(out)
    blas.gemm(stationary, moving, now, False)
    calls = []
    with blas.queued(calls):
        blas.gemm(stationary, moving, out, False)
    assert len(calls) == 1 and not out.any()  # recorded, not made
    blas.run_queued(calls)
    assert np.array_equal(out, now)


def test_queued_gemms_made_in_batches_give_the_bits_of_one_call_each():
    """run_queued sends runs of large products to sgemm_batch; small products and single rows or
    columns go to cblas_sgemm alone. Every product gets the bits of its own call."""
    rng = np.random.default_rng(6)
    shapes = [(128, 128, 512), (128, 128, 512), (96, 128, 256), (128, 1, 512), (64, 64, 64),
              (128, 128, 512), (128, 128, 200), (128, 128, 512)]
    big = rng.standard_normal((128, 8, 1200), dtype=np.float32)
    calls, alone = [], []
    for index, (k, m, n) in enumerate(shapes):
        stationary = big[:k, index % 8, 3:3 + m]
        moving = big[:k, (index + 1) % 8, 600:600 + n]
        starts = rng.standard_normal((m, n), dtype=np.float32)
        outs = [starts.copy(), starts.copy()]
        calls.append((stationary, moving, outs[0], index % 2 == 0))
        alone.append((stationary, moving, outs[1], index % 2 == 0))
    with Runtime().one_blas_thread():
        blas.run_queued(calls)
        for call in alone:
            blas.gemm(*call)
    for batched, single in zip(calls, alone, strict=True):
        assert np.array_equal(batched[2], single[2])
    library = blas._openblas()
    if library is not None and library.sgemm_batch is not None:
        taken = [blas._batched(blas._sgemm_args(library, *call)) for call in calls]
        assert taken == [True, True, True, False, False, True, True, True]


def test_queued_gemms_into_one_tile_keep_their_order_with_several_blas_threads():
    """With more than one BLAS thread the batch routine would make its products side by side; a
    chain of GEMMs adding into one tile must still be made one after another."""
    rng = np.random.default_rng(7)
    stationary, moving = rng.standard_normal((2, 128, 8, 512), dtype=np.float32)
    queued, alone = np.zeros((128, 512), np.float32), np.zeros((128, 512), np.float32)
    calls = [(stationary[:, k, :128], moving[:, k], queued, True) for k in range(8)]
    previous = blas.threads()
    blas.set_threads(2)  # whatever the machine's core count; the bits depend on it, so both use it
    try:
        blas.run_queued(calls)
        for k in range(8):
            blas.gemm(stationary[:, k, :128], moving[:, k], alone, True)
    finally:
        blas.set_threads(previous)
    assert np.array_equal(queued, alone)
