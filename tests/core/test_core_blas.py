"""Kernels may cap numpy's BLAS threads; the previous setting always comes back."""

from trnsim.core import blas


def test_limited_sets_and_restores_the_thread_count():
    functions = blas._openblas()
    if functions is None:  # no OpenBLAS to steer: the context manager must be a no-op
        with blas.limited(1):
            pass
        return
    setter, getter = functions
    before = getter()
    with blas.limited(1):
        assert getter() == 1
    assert getter() == before
    with blas.limited(None):
        assert getter() == before


def test_threads_for_kernels_is_one_or_none_and_cached():
    choice = blas.threads_for_kernels()
    assert choice in (1, None)
    assert blas.threads_for_kernels() == choice or blas._single_thread_is_faster.cache_info().currsize == 1
