"""Deferred execution (core/deferred.py) gives what issuing instructions one by one gives.

Each test runs a kernel twice, deferred (the default) and with `config.override(eager=True)`,
and compares values, traces and errors. Independent matmul chains run on worker threads, each
matmul the same BLAS call as in eager execution, so values are compared bit for bit
(tests/nki/test_nki_bitwise_modes.py does so for strict and LNC=2 runs and many kernels)."""

import contextlib
import contextvars
import io
import time

import numpy as np
import pytest
from kernel_helpers import on_chip

import trnsim
import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core import deferred
from trnsim.core.isa import Memory, Opcode
from trnsim.errors import HazardError, KernelError, ShapeError


@nki.jit
def blocked_matmul(lhsT, rhs, out_dtype=nl.float32):
    """[K, M].T @ [K, N] with every K step of every output tile in one block (M, N <= 512)."""
    k_size, m_size = lhsT.shape
    n_size = rhs.shape[1]
    k_tiles, m_tiles, n_tiles = k_size // 128, m_size // 128, n_size // 256
    out = nl.ndarray((m_size, n_size), dtype=out_dtype, buffer=nl.shared_hbm)
    left = nl.ndarray((128, k_tiles, m_size), dtype=lhsT.dtype, buffer=nl.sbuf)
    right = nl.ndarray((128, k_tiles, n_size), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=lhsT.reshape((k_tiles, 128, m_size)).permute((1, 0, 2)))
    nisa.dma_copy(dst=right, src=rhs.reshape((k_tiles, 128, n_size)).permute((1, 0, 2)))
    for m in range(m_tiles):
        row = nl.ndarray((128, n_size), dtype=out_dtype, buffer=nl.sbuf)
        for n in range(n_tiles):
            acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
            for k in range(k_tiles):
                nisa.nc_matmul(dst=acc, stationary=left[:, k, m * 128:(m + 1) * 128],
                               moving=right[:, k, n * 256:(n + 1) * 256])
            nisa.tensor_copy(dst=row[:, n * 256:(n + 1) * 256], src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=row)
    return out



def test_a_copy_out_of_psum_runs_once_its_chain_is_done_while_later_chains_multiply(monkeypatch):
    """The first output tile's copy starts before the last chain's last GEMM ends (each GEMM is
    slowed to 5 ms and made alone, so the order does not depend on the machine); the values are
    eager's."""
    monkeypatch.setattr(deferred, "BATCH", 1)
    original_gemm, original_run = deferred.blas.run_queued, deferred.run_instruction
    gemms_ended, copies_started = [], []

    def slow_gemm(calls):
        time.sleep(0.005 * len(calls))
        original_gemm(calls)
        gemms_ended.extend([time.perf_counter()] * len(calls))

    def run(ins, inputs, outputs, state, strict):
        if ins.opcode is Opcode.TENSOR_COPY:
            copies_started.append(time.perf_counter())
        original_run(ins, inputs, outputs, state, strict)
    monkeypatch.setattr(deferred.blas, "run_queued", slow_gemm)
    monkeypatch.setattr(deferred, "run_instruction", run)
    lhsT, rhs = _inputs()
    result = nki.simulate(blocked_matmul)(lhsT, rhs)
    assert len(gemms_ended) == 12  # 2 x 2 output tiles, 3 K steps each, every GEMM on a worker
    assert copies_started[0] < max(gemms_ended)
    monkeypatch.undo()
    with trnsim.config.override(eager=True):
        assert np.array_equal(result, nki.simulate(blocked_matmul)(lhsT, rhs))




def test_an_instruction_error_wins_over_a_later_chains_gemm_error(monkeypatch):
    """Row 0's store fails; the GEMMs of row 1's chains, issued after it, fail too (a GEMM fails
    only by a trnsim bug): the store's error is the one raised, as in issue order."""
    original_run, original_gemm = deferred.run_instruction, deferred.blas.run_queued

    def failing_gemm(calls):
        for stationary, *_rest in calls:
            if np.all(stationary == 7.0):  # row 1's columns of lhsT
                time.sleep(0.01)
                raise KernelError("a GEMM of row 1 failed")
        original_gemm(calls)

    def failing_store(ins, inputs, outputs, state, strict):
        if ins.opcode is Opcode.DMA_COPY and outputs[0].storage.memory is Memory.HBM:
            raise KernelError("row 0's store failed")
        original_run(ins, inputs, outputs, state, strict)
    monkeypatch.setattr(deferred.blas, "run_queued", failing_gemm)
    monkeypatch.setattr(deferred, "run_instruction", failing_store)
    lhsT, rhs = _inputs()
    lhsT[:, 128:] = 7.0
    with pytest.raises(KernelError, match="row 0's store failed"):
        nki.simulate(blocked_matmul)(lhsT, rhs)


def _stored(sums):
    """[128, 256] PSUM tiles side by side in a new HBM tensor."""
    out = nl.ndarray((128, 256 * len(sums)), dtype=nl.float32, buffer=nl.shared_hbm)
    for n, acc in enumerate(sums):
        tile = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tile, src=acc)
        nisa.dma_copy(dst=out[:, n * 256:(n + 1) * 256], src=tile)
    return out


@nki.jit
def overwrite_after_matmuls(lhsT, rhs):
    """Two output tiles' matmuls read one fp32 tile (their GEMMs read it in place, not a copy);
    then the kernel overwrites it."""
    left = on_chip(lhsT)
    right = on_chip(rhs)
    sums = [nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum) for _ in range(2)]
    for n in range(2):
        nisa.nc_matmul(dst=sums[n], stationary=left, moving=right[:, n * 256:(n + 1) * 256])
    nisa.memset(dst=left, value=0.0)
    return _stored(sums)


def test_an_instruction_that_overwrites_a_matmul_operand_waits_for_its_gemms(monkeypatch, on_workers):
    """The memset waits until both chains' GEMMs have read the tile (each GEMM is slowed to 20 ms so
    that, without the wait, the memset would win); the values are eager's."""
    original = deferred.blas.run_queued

    def slow_gemm(calls):
        time.sleep(0.02 * len(calls))
        original(calls)
    monkeypatch.setattr(deferred.blas, "run_queued", slow_gemm)
    lhsT, rhs = _inputs(k=128, m=128, n=512)
    result = nki.simulate(overwrite_after_matmuls)(lhsT, rhs)
    assert len(on_workers) == 2
    with trnsim.config.override(eager=True):
        assert np.array_equal(result, nki.simulate(overwrite_after_matmuls)(lhsT, rhs))
    np.testing.assert_allclose(result, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)

def test_a_gemm_that_fails_on_a_worker_is_raised_and_nothing_waits_forever(monkeypatch):
    original = deferred.blas.run_queued
    calls = []

    def failing(gemms):
        calls.extend(gemms)
        if len(calls) >= 2:
            raise KernelError("the second worker GEMM failed")
        original(gemms)
    monkeypatch.setattr(deferred.blas, "run_queued", failing)
    with pytest.raises(KernelError, match="second worker GEMM failed"):
        nki.simulate(blocked_matmul)(*_inputs())

@nki.jit
def one_psum_tile(lhsT, rhs):
    """The same product with ONE PSUM tile reused by every output tile: each tile's first matmul
    waits for the copy out of the one before."""
    k_size, m_size = lhsT.shape
    out = nl.ndarray((m_size, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
    for m in range(m_size // 128):
        for n in range(rhs.shape[1] // 256):
            for k in range(k_size // 128):
                left = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                right = nl.load(rhs[k * 128:(k + 1) * 128, n * 256:(n + 1) * 256])
                nisa.nc_matmul(dst=acc, stationary=left, moving=right)
            tile = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=tile, src=acc)
            nl.store(out[m * 128:(m + 1) * 128, n * 256:(n + 1) * 256], tile)
    return out


def _inputs(k=384, m=256, n=512, dtype=np.float32):
    rng = np.random.default_rng(7)
    return rng.standard_normal((k, m)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def test_a_block_of_matmuls_runs_on_workers_with_eager_bits(on_workers):
    lhsT, rhs = _inputs()
    deferred_out = nki.simulate(blocked_matmul)(lhsT, rhs)
    assert len(on_workers) == 12  # 2 x 2 output tiles, 3 K steps each
    with trnsim.config.override(eager=True):
        eager_out = nki.simulate(blocked_matmul)(lhsT, rhs)
    assert len(on_workers) == 12  # eager runs never queue
    assert np.array_equal(deferred_out, eager_out)
    np.testing.assert_allclose(deferred_out, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def test_deferral_never_changes_the_trace():
    """Same instructions, operands and SBUF/PSUM addresses: queued tiles do not stay allocated."""
    lhsT, rhs = _inputs(dtype=np.float32)
    traces = []
    for eager in (False, True):
        with trnsim.config.override(eager=eager):
            nki.simulate(blocked_matmul)(lhsT, rhs)
        traces.append([(i.opcode, i.outputs, i.inputs, i.params) for i in blocked_matmul.last_trace])
    assert traces[0] == traces[1]


def test_a_reused_psum_tile_stays_exact(on_workers):
    """Each output tile's copy waits for the GEMMs into the one PSUM tile, and the next tile's
    first matmul waits for that copy."""
    lhsT, rhs = _inputs(k=256, m=256, n=512)
    result = nki.simulate(one_psum_tile)(lhsT, rhs)
    with trnsim.config.override(eager=True):
        eager = nki.simulate(one_psum_tile)(lhsT, rhs)
    assert len(on_workers) == 8  # 2 x 2 output tiles, 2 K steps each
    assert np.array_equal(result, eager)
    np.testing.assert_allclose(result, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def test_reading_a_tile_from_python_runs_the_queue_first():
    """device_print and register_load look at values the queued matmul produced."""
    ones = np.ones((128, 128), np.float32)

    @nki.jit
    def peek(a):
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=nl.load(a), moving=nl.load(a))
        total = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=total, src=acc[:, 0:1])
        register = nisa.register_alloc()
        nisa.register_load(register, total[0:1, 0:1])
        nl.device_print("acc", acc[0:1, 0:2])
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        marker = nl.full((1, 1), int(register), dtype=nl.float32)
        nl.store(out, marker)
        return out

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        out = nki.simulate(peek)(ones)
    assert out[0, 0] == 128.0
    assert "128" in printed.getvalue()


def test_an_earlier_execution_error_is_reported_before_a_later_one():
    """The gather's out-of-range row fails when it executes, among matmuls whose GEMMs run on
    workers; the oversized tile on a later line must not hide it."""
    data = np.ones((128, 128), np.float32)

    @nki.jit
    def faulty(a, rows):
        tile = nl.load(a)
        for _ in range(2):
            acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=acc, stationary=tile, moving=tile)
        gathered = nl.ndarray((2, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=gathered, src=a.vector_select(0, nl.load(rows)))
        again = nl.load(a)
        nisa.nc_matmul(dst=acc, stationary=again, moving=again)
        nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)  # partition dim over 128
        return acc

    for eager in (True, False):
        with trnsim.config.override(eager=eager), pytest.raises(HazardError, match="indirect DMA"):
            nki.simulate(faulty, target="trn2")(data, np.array([[1], [500]], np.int32))
        with trnsim.config.override(eager=eager), pytest.raises(ShapeError):
            nki.simulate(faulty, target="trn2")(data, np.array([[1], [2]], np.int32))


def test_a_first_matmul_that_accumulates_still_warns_and_adds():
    """accumulate=True onto fresh PSUM is not grouped: it warns and adds as eager execution does."""
    ones = np.ones((128, 128), np.float32)

    @nki.jit
    def accumulate_first(a):
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=1.0)
        nisa.nc_matmul(dst=acc, stationary=nl.load(a), moving=nl.load(a), accumulate=True)
        nisa.nc_matmul(dst=acc, stationary=nl.load(a), moving=nl.load(a), accumulate=True)
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tile, src=acc)
        nl.store(out, tile)
        return out

    assert np.all(nki.simulate(accumulate_first)(ones) == 257.0)


def test_stochastic_rounding_draws_come_in_issue_order(monkeypatch):
    """Deferred execution draws from the rounding stream in the order eager execution does: with SR
    on, deferred and eager bf16 results are the same bits."""
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_SEED", "5")
    lhsT, rhs = _inputs(k=256, m=512, n=512)
    lhsT = np.concatenate([lhsT, lhsT], axis=1)  # two blocks of 512 columns

    def run(eager):
        with trnsim.config.override(eager=eager):
            return np.asarray(nki.simulate(two_blocks)(lhsT, rhs), np.float32)
    deferred_out = contextvars.Context().run(run, False)  # each from a freshly seeded stream
    eager_out = contextvars.Context().run(run, True)
    assert np.array_equal(deferred_out, eager_out)
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "0")
    assert np.mean(deferred_out != contextvars.Context().run(run, False)) > 0.2  # SR was on


@nki.jit
def two_blocks(lhsT, rhs):
    """blocked_matmul's body over two 512-column halves of lhsT, bf16 results."""
    half = lhsT.shape[1] // 2
    out = nl.ndarray((lhsT.shape[1], rhs.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    for block in range(2):
        part = blocked_matmul.fn(lhsT[:, block * half:(block + 1) * half], rhs, nl.bfloat16)
        nisa.dma_copy(dst=out[block * half:(block + 1) * half, :], src=part)
    return out


def test_the_kernel_issues_on_while_its_gemms_run(monkeypatch):
    """With every GEMM slowed to 10 ms, the kernel has issued its last instruction before the
    workers are done (the copies and stores wait in the queue); the values are eager's."""
    original = deferred.blas.run_queued
    ended = []

    def slow_gemm(calls):
        time.sleep(0.01 * len(calls))
        original(calls)
        ended.append(time.perf_counter())
    issued = []
    original_add = deferred.DeferredQueue.add

    def add(self, ins, inputs, outputs):
        original_add(self, ins, inputs, outputs)
        issued.append(time.perf_counter())
    monkeypatch.setattr(deferred.blas, "run_queued", slow_gemm)
    monkeypatch.setattr(deferred.DeferredQueue, "add", add)
    lhsT, rhs = _inputs()
    result = nki.simulate(blocked_matmul)(lhsT, rhs)
    assert issued[-1] < ended[-1]
    monkeypatch.undo()
    with trnsim.config.override(eager=True):
        assert np.array_equal(result, nki.simulate(blocked_matmul)(lhsT, rhs))


def test_at_most_ahead_gemms_wait_for_a_worker(monkeypatch, on_workers):
    """With AHEAD = 2, the kernel's thread waits for the workers instead of queueing all 12."""
    monkeypatch.setattr(deferred, "AHEAD", 2)
    original = deferred.blas.run_queued
    waiting = []

    def slow_gemm(calls):
        time.sleep(0.005 * len(calls))
        original(calls)
    original_hold = deferred.DeferredQueue._hold_back

    def hold_back(self):
        original_hold(self)
        waiting.append(sum(lane.posted - lane.done for lane in self.lanes))
    monkeypatch.setattr(deferred.blas, "run_queued", slow_gemm)
    monkeypatch.setattr(deferred.DeferredQueue, "_hold_back", hold_back)
    lhsT, rhs = _inputs()
    result = nki.simulate(blocked_matmul)(lhsT, rhs)
    assert len(waiting) == 12 and max(waiting) <= 2
    with trnsim.config.override(eager=True):
        assert np.array_equal(result, nki.simulate(blocked_matmul)(lhsT, rhs))


def test_a_load_into_a_fresh_tile_does_not_wait_for_pending_copies(monkeypatch):
    """two_blocks' second block loads its inputs while the first block's copies still wait for
    their GEMMs (slowed to 10 ms): the loads run at once, before those copies."""
    original = deferred.blas.run_queued

    def slow_gemm(calls):
        time.sleep(0.01 * len(calls))
        original(calls)
    order = []
    original_run = deferred.run_instruction

    def run(ins, inputs, outputs, state, strict):
        order.append(ins.opcode)
        original_run(ins, inputs, outputs, state, strict)
    monkeypatch.setattr(deferred.blas, "run_queued", slow_gemm)
    monkeypatch.setattr(deferred, "run_instruction", run)
    lhsT, rhs = _inputs(k=256, m=512, n=512)
    lhsT = np.concatenate([lhsT, lhsT], axis=1)
    result = nki.simulate(two_blocks)(lhsT, rhs)
    first_copy = order.index(Opcode.TENSOR_COPY)
    assert order[:first_copy].count(Opcode.DMA_COPY) == 4  # both blocks' two loads
    monkeypatch.undo()
    with trnsim.config.override(eager=True):
        assert np.array_equal(result, nki.simulate(two_blocks)(lhsT, rhs))


def test_an_error_in_a_pending_instruction_is_raised_by_the_kernel_call(monkeypatch):
    """The first copy out of PSUM fails after the kernel has issued on: the kernel call raises
    that error, and nothing issued after it runs."""
    original = deferred.run_instruction
    ran = []

    def failing(ins, inputs, outputs, state, strict):
        ran.append(ins.opcode)
        if ins.opcode is Opcode.TENSOR_COPY:
            raise KernelError("the first copy failed")
        original(ins, inputs, outputs, state, strict)
    monkeypatch.setattr(deferred, "run_instruction", failing)
    lhsT, rhs = _inputs()
    with pytest.raises(KernelError, match="first copy failed"):
        nki.simulate(blocked_matmul)(lhsT, rhs)
    assert ran.count(Opcode.TENSOR_COPY) == 1


@nki.jit
def k_outer_pair(lhsT, rhs):
    """Two [128, 256] output tiles whose K loops interleave: k0 n0, k0 n1, k1 n0, ..."""
    k_tiles = lhsT.shape[0] // 128
    left = nl.ndarray((128, k_tiles, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
    right = nl.ndarray((128, k_tiles, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=lhsT.reshape((k_tiles, 128, 128)).permute((1, 0, 2)))
    nisa.dma_copy(dst=right, src=rhs.reshape((k_tiles, 128, 512)).permute((1, 0, 2)))
    sums = [nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum) for _ in range(2)]
    for k in range(k_tiles):
        for n in range(2):
            nisa.nc_matmul(dst=sums[n], stationary=left[:, k, :], moving=right[:, k, n * 256:(n + 1) * 256])
    return _stored(sums)


def test_of_errors_in_side_by_side_chains_the_earliest_issued_is_raised(monkeypatch):
    """Chain n=0 fails at k=2 and chain n=1 at k=0: n=1's matmul was issued first, although its
    chain is the second one."""
    original = deferred.run_instruction

    def failing(ins, inputs, outputs, state, strict):
        if ins.opcode is Opcode.MATMUL:
            k, n = divmod(inputs[1].offset, 512)
            if (k, n // 256) in ((2, 0), (0, 1)):
                raise KernelError(f"matmul k={k} n={n // 256} failed")
        original(ins, inputs, outputs, state, strict)
    monkeypatch.setattr(deferred, "run_instruction", failing)
    lhsT, rhs = _inputs(k=384, m=128, n=512)
    with pytest.raises(KernelError, match="k=0 n=1"):
        nki.simulate(k_outer_pair)(lhsT, rhs)


def test_no_worker_thread_outlives_its_kernel():
    """The copy and the GEMM it waits for are done before the kernel's last instruction, so nothing
    is left to run at its end: the workers still stop once the launch is over."""
    import gc
    import threading

    @nki.jit
    def done_early(a):
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=nl.load(a), moving=nl.load(a))
        tile = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tile, src=acc)
        time.sleep(0.05)
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    before = set(threading.enumerate())
    result = nki.simulate(done_early)(np.ones((128, 128), np.float32))
    gc.collect()
    assert np.all(result == 128.0)
    assert not [thread for thread in set(threading.enumerate()) - before if thread.name == "trnsim-gemm"]
