"""The process-wide state lives on one Runtime, and its reset returns the process to a fresh
state: empty pool, no cached kernel lines, zeroed counters, cleared caches, and kernels still
give the same bits afterwards."""

import gc
import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
import trnsim.runtime
from trnsim.core import blas
from trnsim.core.runtime import KERNEL_SWITCH_INTERVAL_S, Runtime

RNG = np.random.default_rng(11)
LHS_T = RNG.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)
RHS = RNG.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)


@nki.jit
def matmul_then_scale(lhsT, rhs):
    """Two K tiles accumulated in PSUM, then a vector op: pooled tiles (128 x 512 fp32 = 256 KiB)."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=result, data=acc, op0=nl.multiply, operand0=0.5)
    nisa.dma_copy(dst=out, src=result)
    return out


def _fresh(runtime: Runtime) -> bool:
    return (runtime.pool.kept_bytes == 0 and not runtime.pool.blocks
            and not runtime.kernel_lines and all(not counter for counter in runtime.counters.values()))


def test_the_public_module_reaches_the_one_runtime():
    assert isinstance(trnsim.runtime.current(), trnsim.runtime.Runtime)
    assert trnsim.runtime.current() is trnsim.runtime.current()


def test_a_kernel_run_leaves_state_on_the_runtime_and_reset_clears_it():
    runtime = trnsim.runtime.current()
    matmul_then_scale(LHS_T, RHS)
    assert runtime.pool.kept_bytes > 0 and runtime.kernel_lines
    runtime.reset()
    assert _fresh(runtime)


def test_reset_zeroes_counters_and_clears_registered_caches():
    runtime = Runtime()
    runtime.counter("test.things")["a"] += 3
    cleared = []
    runtime.on_reset(lambda: cleared.append(True))
    runtime.reset()
    assert runtime.counter("test.things") == {} and cleared == [True]


def test_two_resets_are_one():
    runtime = trnsim.runtime.current()
    matmul_then_scale(LHS_T, RHS)
    runtime.reset()
    runtime.reset()
    assert _fresh(runtime)


def test_a_kernel_after_reset_gives_identical_bits():
    before = matmul_then_scale(LHS_T, RHS)
    trnsim.runtime.current().reset()
    after = matmul_then_scale(LHS_T, RHS)
    assert np.array_equal(before, after)
    expected = (LHS_T.astype(np.float32).T @ RHS.astype(np.float32)) * np.float32(0.5)
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-5)


def test_torch_fallback_counts_and_op_times_are_the_runtimes():
    torch = pytest.importorskip("torch")
    import trnsim.torch
    from trnsim.torch import devicetime

    x = torch.tensor([3.0, 1.0, 2.0], device="neuron")
    with pytest.warns(trnsim.torch.FallbackWarning):
        torch.kthvalue(x, 2)
    devicetime.op_time_s("aten.relu.default", (((128, 512), "float32"),), (((128, 512), "float32"),))
    assert trnsim.torch.fallback_counts() == {"aten.kthvalue.values": 1}
    assert devicetime.op_time_s.cache_info().currsize > 0
    trnsim.runtime.current().reset()
    assert trnsim.torch.fallback_counts() == {} and devicetime.op_time_s.cache_info().currsize == 0


def test_overlapping_gc_pauses_restore_the_collector_when_the_last_ends():
    runtime = Runtime()
    assert gc.isenabled()
    first, second = runtime.gc_paused(), runtime.gc_paused()
    first.__enter__()
    second.__enter__()  # a schedule on another thread starts while the first runs
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second is still running
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_gc_pause_leaves_a_collector_the_user_turned_off_off():
    runtime = Runtime()
    gc.disable()
    try:
        with runtime.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_kernel_runs_with_a_short_switch_interval_and_the_process_gets_its_own_back():
    seen = []

    @nki.jit
    def copy(x):
        seen.append(sys.getswitchinterval())
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out
    before = sys.getswitchinterval()
    nki.simulate(copy)(np.ones((4, 4), np.float32))
    assert seen == [KERNEL_SWITCH_INTERVAL_S] and sys.getswitchinterval() == before


def test_overlapping_switch_interval_uses_restore_it_when_the_last_ends():
    runtime = Runtime()
    before = sys.getswitchinterval()
    first, second = runtime.quick_gil_handoff(), runtime.quick_gil_handoff()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert sys.getswitchinterval() == KERNEL_SWITCH_INTERVAL_S
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == before


def test_overlapping_one_blas_thread_uses_restore_the_count_when_the_last_ends():
    """The ranks of a multi-rank launch are threads that each run a kernel: a rank ending while
    another still runs must neither restore the count early nor keep one thread for good."""
    runtime = Runtime()
    blas.set_threads(2)
    try:
        first, second = runtime.one_blas_thread(), runtime.one_blas_thread()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert blas.threads() == 1 or blas._openblas() is None
        second.__exit__(None, None, None)
        assert blas.threads() == 2 or blas._openblas() is None
    finally:
        blas.set_threads(blas.started_threads())

