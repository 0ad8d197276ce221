"""Kernels may cap numpy's BLAS threads (the previous setting always comes back), and matmuls
write or add into PSUM through one sgemm call that gives numpy's bits."""

import contextlib

import numpy as np
import pytest

from trnsim.core import blas
from trnsim.core.runtime import current as current_runtime


def test_limited_sets_and_restores_the_thread_count():
    functions = blas._openblas()
    if functions is None:  # no OpenBLAS to steer: the context manager must be a no-op
        with blas.limited(1):
            pass
        return
    getter = functions.get_threads
    before = getter()
    with blas.limited(1):
        assert getter() == 1
    assert getter() == before
    with blas.limited(None):
        assert getter() == before


def test_as_started_gives_grids_every_thread_inside_a_limited_kernel():
    functions = blas._openblas()
    if functions is None:
        with blas.as_started():
            pass
        return
    getter = functions.get_threads
    with blas.limited(1):
        with blas.as_started():
            assert getter() == functions.started_threads
        assert getter() == 1


def test_threads_for_kernels_is_one_or_none_and_kept_on_the_runtime():
    choice = blas.threads_for_kernels()
    assert choice in (1, None)
    if blas._openblas() is not None:
        assert current_runtime().kernel_blas_threads[1] == choice


def test_busy_machine_gets_one_thread_without_probing(monkeypatch):
    monkeypatch.setattr(blas, "_busy", lambda: True)
    monkeypatch.setattr(blas, "limited", None)  # probing would call it and fail
    assert blas._single_thread_is_faster() == 1


def test_one_slow_round_does_not_decide(monkeypatch):
    """Default threads lose the first round to a burst of other work, then win clearly."""
    default_cost_s = {1: 1.0, 2: 5.0, 3: 0.5}  # after the warm-up, round 1 (a burst), round 2
    state = {"now": 0.0, "single": False, "entered": 0}

    @contextlib.contextmanager
    def fake_limited(threads):
        state["single"], state["entered"] = True, state["entered"] + 1
        yield
        state["single"] = False

    class FakeMatrix:
        T = property(lambda self: self)

        def __matmul__(self, other):
            state["now"] += 1.0 if state["single"] else default_cost_s[state["entered"]]
            return self

    monkeypatch.setattr(blas, "_busy", lambda: False)
    monkeypatch.setattr(blas, "limited", fake_limited)
    monkeypatch.setattr(blas.np, "ones", lambda *a, **k: FakeMatrix())
    monkeypatch.setattr(blas.time, "perf_counter", lambda: state["now"])
    assert blas._single_thread_is_faster() is None
    assert state["entered"] == 3  # it took a second round to decide


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
