"""Launch grids and LNC=2: shared tensors, trn1/inf2 grids, sendrecv between the cores, tiles of
other programs, program_id/num_programs axes. Each refusal comes at once, at the kernel's line,
from simulate and trace alike."""

import time

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ArgumentError, CapacityError, KernelError, ShapeError, UnsupportedError

X = np.zeros((128, 64), np.float32)
SPEC = nki.TensorSpec((128, 64), "float32")


def refused_in_both_modes(error, match, kernel, target="trn2"):
    """The same error from a value run and a trace-only run, at once."""
    started = time.perf_counter()
    with pytest.raises(error, match=match) as simulated:
        nki.simulate(kernel, target=target)(X)
    with pytest.raises(error, match=match) as traced:
        nki.trace(kernel, SPEC, target=target)
    assert str(simulated.value) == str(traced.value)
    assert time.perf_counter() - started < 10
    return simulated.value


def out():
    return nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)


@nki.jit
def shared_of_program_dependent_dtype(a):
    dtype = nl.float32 if nl.program_id(0) == 0 else nl.bfloat16
    nl.ndarray((64, 64), dtype=dtype, buffer=nl.shared_hbm)
    return out()


@nki.jit
def shared_of_program_dependent_shape(a):
    nl.ndarray((64 * (nl.program_id(0) + 1), 64), dtype=nl.float32, buffer=nl.shared_hbm)
    return out()


@pytest.mark.parametrize("kernel, asked, made", [
    (shared_of_program_dependent_dtype, r"bfloat16\[64, 64\]", r"float32\[64, 64\]"),
    (shared_of_program_dependent_shape, r"float32\[128, 64\]", r"float32\[64, 64\]")])
@pytest.mark.parametrize("grid", [2, 3])
def test_the_kth_shared_tensor_must_match_in_every_program(kernel, asked, made, grid):
    """Program 1 silently got program 0's fp32 tensor when it asked for bf16; a larger shape failed
    inside trnsim in simulate and passed in trace."""
    for _ in range(5):  # under LNC=2 either core may ask first: the message is the same
        refused_in_both_modes(KernelError, rf"test_nki_lnc.py:\d+ in shared_of_.*program 0 asks for {made} "
                                           rf"and program 1 for {asked}", kernel[grid])


@nki.jit
def copy_rows(a):
    result = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a[0:128, 0:64])
    nisa.dma_copy(dst=result, src=tile)
    return result


@pytest.mark.parametrize("target, cores", [("trn1", 1), ("inf2", 1), ("trn2", 2), ("trn3", 2)])
def test_a_grid_of_two_is_lnc2_only_where_the_core_has_it(target, cores):
    """trn1 and inf2 have no LNC=2: kernel[2] ran there as two cores with two HBM shares."""
    trace = nki.trace(copy_rows[2], SPEC, target=target)
    assert trace.cores == cores and sorted({ins.core for ins in trace}) == [0, 1]
    np.testing.assert_array_equal(nki.simulate(copy_rows[2], target=target)(X + 1), X + 1)
    twenty_gib = nki.TensorSpec(((20 << 30) // 256, 64), "float32")
    if cores == 1:  # one core's share of HBM (16 GiB), as for any other grid
        with pytest.raises(CapacityError, match="HBM is full"):
            nki.trace(copy_rows[2], twenty_gib, target=target)
    else:  # two cores' shares
        nki.trace(copy_rows[2], twenty_gib, target=target)


@nki.jit
def barrier_on_trn1(a):
    tile = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.core_barrier(data=tile, cores=(0, 1))
    return out()


def test_core_barrier_in_a_trn1_grid_needs_a_newer_generation():
    refused_in_both_modes(UnsupportedError, "generation 3", barrier_on_trn1[2], target="trn1")


def _exchange(case):
    @nki.jit
    def exchange(a):
        me = nl.program_id(0)
        columns = 64 if me == 0 or case != "size" else 32
        dtype = nl.bfloat16 if me == 1 and case == "dtype" else nl.float32
        src = nl.ndarray((128, columns), dtype=dtype, buffer=nl.sbuf)
        dst = nl.ndarray((128, columns), dtype=dtype, buffer=nl.sbuf)
        nisa.memset(dst=src, value=1.0)
        receive_from = 0 if case == "from itself" else 1 - me
        pipe = -1 if case == "negative pipe" else 0
        nisa.sendrecv(src=src, dst=dst, send_to_rank=1 - me, recv_from_rank=receive_from, pipe_id=pipe)
        return out()
    return exchange[2]


@pytest.mark.parametrize("case, error, match", [
    ("size", KernelError, r"sendrecv on core 0: core 1 sends float32\[128, 32\] into this core's dst of "
                          r"float32\[128, 64\]"),
    ("dtype", KernelError, r"core 1 sends bfloat16\[128, 64\] into this core's dst of float32\[128, 64\]"),
    ("from itself", KernelError, "sendrecv on core 0: it receives from itself"),
    ("negative pipe", ArgumentError, "pipe_id=-1; it must be 0 or more")])
def test_sendrecv_mismatches_are_refused_at_once_in_both_modes(case, error, match):
    """Tiles of other sizes failed inside trnsim (cannot reshape) in simulate and passed in trace; a
    core receiving from itself waited 60 s; a negative pipe_id passed."""
    refused = refused_in_both_modes(error, match, _exchange(case))
    assert str(refused).startswith("test_nki_lnc.py:")


def test_a_tile_sent_to_the_core_itself_arrives():
    @nki.jit
    def to_itself(a):
        src = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        dst = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        me = nl.program_id(0)
        nisa.memset(dst=src, value=float(me + 1))
        nisa.sendrecv(src=src, dst=dst, send_to_rank=me, recv_from_rank=me, pipe_id=10**9)
        result = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=result[me * 4:(me + 1) * 4, :], src=dst)
        return result
    expected = np.repeat([[1.0], [2.0]], 4, axis=0) * np.ones((1, 4))
    np.testing.assert_array_equal(nki.simulate(to_itself[2], target="trn2")(X), expected)
    nki.trace(to_itself[2], SPEC, target="trn2")


def _handed_over(grid):
    box = {}

    @nki.jit
    def handed_over(a):
        me = nl.program_id(0)
        if me == 0:
            box["tile"] = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=box["tile"], src=a)
        if grid == 2:
            nisa.core_barrier(cores=(0, 1))
        result = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        if me == 1:
            nisa.dma_copy(dst=result, src=box["tile"])
        return result
    return handed_over[grid]


@pytest.mark.parametrize("grid", [2, 3])
def test_a_tile_of_another_program_is_refused(grid):
    """Core 1 of LNC=2 (and program 1 of a grid) read program 0's SBUF tile, handed over in a Python
    object: each core has its own SBUF."""
    refused_in_both_modes(KernelError, r"test_nki_lnc.py:\d+ in handed_over: nisa.dma_copy: tile "
                                       r"'handed_over:\d+' was made by another program of this launch; this "
                                       r"is program 1", _handed_over(grid))


def _grid_query(grid, query):
    seen = []

    @nki.jit
    def ask(a):
        seen.append(query())
        return out()
    return (ask[grid] if grid else ask), seen


@pytest.mark.parametrize("grid, query, match", [
    ((2, 3), lambda: nl.num_programs((0, 0)), "an axis is named twice"),   # was 4
    ((), lambda: nl.program_id(5), "axis 5 of a launch without a grid"),   # was 0
    ((), lambda: nl.num_programs(1), "axis 1 of a launch without a grid"),  # was 1
    ((2, 3), lambda: nl.program_id(2), r"axis 2 of the launch grid \[2, 3\]")])
def test_grid_axes_outside_the_grid_are_refused_with_or_without_a_grid(grid, query, match):
    kernel, _ = _grid_query(grid, query)
    refused_in_both_modes(ShapeError, match, kernel)


def test_grid_queries_without_a_grid():
    kernel, seen = _grid_query((), lambda: (nl.program_id(0), nl.program_id(-1), nl.num_programs(),
                                            nl.num_programs((0,)), nl.program_ndim()))
    nki.simulate(kernel)(X)
    assert seen == [(0, 0, 1, 1, 0)]
    kernel, seen = _grid_query((2, 3), lambda: nl.num_programs((0, 1)))
    nki.trace(kernel, SPEC)
    assert seen == [6] * 6
