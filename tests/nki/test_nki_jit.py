"""Launching kernels: targets, array kinds, trace vs simulate, grids, LNC=2, loops, printing."""

import time

import ml_dtypes
import numpy as np
import pytest
import torch

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core.isa import Memory, Opcode
from trnsim.errors import ArgumentError, ConfigError, HazardError, KernelError, ShapeError

X = np.arange(128 * 16, dtype=np.float32).reshape(128, 16)


@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
    nl.store(out, tile)
    return out


def test_target_from_argument_environment_and_default(monkeypatch):
    seen = []

    def kernel(x):
        seen.append(nisa.get_nc_version())
        return x
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.delenv("TRNSIM_TARGET", raising=False)
    nki.simulate(kernel)(X)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "gen3")
    nki.simulate(kernel)(X)
    nki.simulate(kernel, target="trn1")(X)
    assert seen == [nisa.nc_version.gen4, nisa.nc_version.gen3, nisa.nc_version.gen2]
    with pytest.raises(ConfigError, match="trn9"):
        nki.simulate(kernel, target="trn9")(X)


def test_numpy_and_torch_round_trip_keep_their_kind():
    np.testing.assert_array_equal(double(X), 2 * X)
    result = nki.simulate(double)(torch.from_numpy(X).to(torch.bfloat16))
    assert isinstance(result, torch.Tensor) and result.dtype == torch.bfloat16
    torch.testing.assert_close(result.float(), torch.from_numpy(2 * X).to(torch.bfloat16).float())


def test_bf16_numpy_inputs_stay_bf16():
    result = double(X.astype(ml_dtypes.bfloat16))
    assert result.dtype == ml_dtypes.bfloat16


def test_inputs_written_by_the_kernel_are_updated_in_place():
    def kernel(x):
        tile = nl.load(x)
        nisa.memset(dst=tile, value=7.0)
        nl.store(x, tile)
        return x
    data = X.copy()
    nki.simulate(kernel)(data)
    assert (data == 7).all()


def test_trace_only_matches_simulate_and_has_no_values():
    simulated = (double(X), double.last_trace)[1]
    traced = nki.trace(double, nki.TensorSpec(X.shape, "float32"))
    assert traced == simulated and traced.target == simulated.target
    assert [i.opcode for i in traced] == [Opcode.DMA_COPY, Opcode.TENSOR_SCALAR, Opcode.DMA_COPY]
    first = traced[0]
    assert first.inputs[0].memory is Memory.HBM and first.outputs[0].memory is Memory.SBUF
    assert first.outputs[0].bytes == X.nbytes and first.where.function == "double"


def test_trace_only_refuses_to_read_values():
    def kernel(x):
        reg = nisa.register_alloc(3)
        for _ in nl.dynamic_range(reg):
            pass
    with pytest.raises(KernelError, match="use trnsim.nki.simulate"):
        nki.trace(kernel, X)
    nki.simulate(kernel)(X)


def test_spmd_grid_program_ids():
    def kernel(x):
        out = nl.ndarray((6, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        row = nl.program_id(0) * nl.num_programs(1) + nl.program_id(1)
        tile = nl.full((1, 16), float(row), nl.float32)
        nl.store(out[row:row + 1, :], tile)
        assert nl.program_ndim() == 2
        return out
    result = nki.jit(kernel)[2, 3](X)
    np.testing.assert_array_equal(result[:, 0], np.arange(6))


def test_lnc2_sendrecv_and_barrier():
    @nki.jit
    def swap(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        half = x.shape[0] // 2
        mine = nl.load(x[me * half:(me + 1) * half, :])
        theirs = nl.ndarray(mine.shape, dtype=mine.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
        nisa.core_barrier(data=theirs, cores=(0, 1))
        nl.store(out[me * half:(me + 1) * half, :], theirs)
        return out
    result = nki.simulate(swap[2], target="trn2")(X)
    np.testing.assert_array_equal(result, np.concatenate([X[64:], X[:64]]))
    trace = nki.trace(swap[2], X, target="trn2")
    assert sorted({i.core for i in trace}) == [0, 1]


def test_runtime_loops_and_device_print(capsys):
    def kernel(x):
        acc = nl.zeros((1, 4), nl.float32)

        def body(i):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=float(i.read_value()))
        nl.fori_loop(0, 5, body)
        nl.device_print("acc=", acc)
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, acc)
        return out
    result = nki.simulate(kernel)(X)
    assert (result == 10).all() and "acc=" in capsys.readouterr().out


def test_removed_jit_arguments_raise():
    with pytest.raises(ConfigError, match="platform_target"):
        nki.jit(platform_target="trn2")


def test_while_loop_and_bare_register_condition():
    def kernel(x):
        acc = nl.zeros((1, 4), nl.float32)
        counter = nisa.register_alloc(3)

        def body(r):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)
            return nisa.register_alloc(r.read_value() - 1)
        nl.while_loop(counter, body)
        flag = nisa.register_alloc(2)
        while flag:
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=10.0)
            nisa.register_move(flag, flag.read_value() - 1)
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, acc)
        return out
    assert (nki.simulate(kernel)(X) == 23).all()


def test_plain_launch_has_no_grid():
    seen = []

    def kernel(x):
        seen.append((nl.program_ndim(), nl.num_programs(axes=0), nl.program_id(axis=0)))
        return x
    nki.simulate(kernel)(X)
    nki.jit(kernel)[2](X)
    assert seen[0] == (0, 1, 0) and sorted(seen[1:]) == [(1, 2, 0), (1, 2, 1)]


def test_lnc2_sendrecv_moves_the_bits_of_its_dtype():
    """A tile went through float32 on its way to the peer: int32 values above 2**24 came back
    rounded (16777217 -> 16777216)."""
    @nki.jit
    def swap(x):
        out = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        mine = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=x)
        theirs = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
        me = nl.program_id(0)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
        nisa.dma_copy(dst=out[me * 4:(me + 1) * 4, :], src=theirs)
        return out
    x = np.array([[16777217, 2**30 + 1, 123456789, -7]] * 4, np.int32)
    np.testing.assert_array_equal(nki.simulate(swap[2], target="trn2")(x), np.concatenate([x, x]))


def test_lnc2_mismatched_peers_are_refused_at_once():
    """A barrier only one core reaches, and a rank the launch does not have, waited 60 s (the
    barrier then raised a raw BrokenBarrierError)."""
    @nki.jit
    def barrier_on_core_0(x):
        if nl.program_id(0) == 0:
            nisa.core_barrier(data=x, cores=(0, 1))
        return nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)

    @nki.jit
    def send_to_rank_5(x):
        tile = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=tile, dst=tile, send_to_rank=5, recv_from_rank=0, pipe_id=0)
        return nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)

    started = time.perf_counter()
    with pytest.raises(KernelError, match="core 1 finished its kernel without a matching call"):
        nki.simulate(barrier_on_core_0[2], target="trn2")(X)
    for launch in (send_to_rank_5[2], send_to_rank_5):
        with pytest.raises(KernelError, match="send_to_rank=5: this launch has"):
            nki.simulate(launch, target="trn2")(X)
    assert time.perf_counter() - started < 10


def _crossed_pipes(x):
    tile = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
    me = nl.program_id(0)
    nisa.sendrecv(src=tile, dst=tile, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=me)
    return nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)


def _sendrecv_on_core_0(x):
    tile = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
    if nl.program_id(0) == 0:
        nisa.sendrecv(src=tile, dst=tile, send_to_rank=1, recv_from_rank=1, pipe_id=0)
    return nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)


def _barrier_then_sendrecv_against_sendrecv_then_barrier(x):
    tile = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
    me = nl.program_id(0)
    if me == 0:
        nisa.core_barrier(data=x, cores=(0, 1))
    nisa.sendrecv(src=tile, dst=tile, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
    if me == 1:
        nisa.core_barrier(data=x, cores=(0, 1))
    return nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)


@pytest.mark.parametrize("body, says", [
    (_crossed_pipes, "sendrecv on core 0: each core waits for the other"),
    (_sendrecv_on_core_0, "sendrecv on core 0: core 1 finished its kernel without a matching call"),
    (_barrier_then_sendrecv_against_sendrecv_then_barrier, "core_barrier on core 0: each core waits"),
])
def test_lnc2_calls_that_never_meet_are_refused_at_once_and_by_trace_alike(body, says):
    """Trace-only runs accepted these (their cores do not wait); crossed pipes waited 60 s."""
    kernel = nki.jit(body)
    started = time.perf_counter()
    messages = set()
    for run in (lambda: nki.simulate(kernel[2], target="trn2")(X),
                lambda: nki.trace(kernel[2], X, target="trn2")):
        with pytest.raises(KernelError, match=says) as raised:
            run()
        messages.add(str(raised.value))
    assert len(messages) == 1 and "test_nki_jit.py" in messages.pop()
    assert time.perf_counter() - started < 10


def test_lnc2_reports_the_lowest_cores_error_every_time():
    """Two cores failing on their own: the error was whichever thread came first."""
    @nki.jit
    def both_fail(x):
        if nl.program_id(0) == 0:
            nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)[5, 0]
        else:
            nisa.memset(dst=x, value="one")
        return x

    for _ in range(10):
        with pytest.raises(HazardError, match="index 5 is out of bounds"):
            nki.simulate(both_fail[2], target="trn2")(X)
    with pytest.raises(HazardError, match="index 5 is out of bounds"):
        nki.trace(both_fail[2], X, target="trn2")


def test_arguments_that_do_not_fit_the_kernel_are_refused_at_its_def():
    @nki.jit
    def add(a, b):
        return a
    for call in (lambda: nki.simulate(add)(X), lambda: nki.simulate(add)(X, X, X),
                 lambda: nki.trace(add, X, X, targte="trn2")):
        with pytest.raises(ArgumentError, match="kernel 'add' called with arguments it does not take"):
            call()
    with pytest.raises(ArgumentError, match="the first argument is the kernel function"):
        nki.simulate(None)


@pytest.mark.parametrize("body, error, says", [
    (lambda: nl.program_id(5), ShapeError, "dim 5 is outside 1 dims"),
    (lambda: nl.num_programs(None), ShapeError, "a dim is an integer"),
    (lambda: list(nl.affine_range(0, 4, 0)), ArgumentError, "step is 0"),
    (lambda: nl.fori_loop(0, 4, lambda i: None, step=0), ArgumentError, "step is 0"),
    (lambda: list(nl.dynamic_range(0, 4, 0)), ArgumentError, "step is 0"),
    (lambda: nl.while_loop(1, lambda r: None), ArgumentError, "while_loop's condition takes integers"),
])
def test_grid_queries_and_loops_refuse_bad_arguments(body, error, says):
    """Each escaped as a raw IndexError, TypeError or ValueError."""
    @nki.jit
    def kernel(x):
        body()
        return nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    with pytest.raises(error, match=says) as raised:
        nki.simulate(kernel[2], target="trn2")(X)
    assert raised.value.where is not None
