"""Launch grids and LNC=2: shared tensors, trn1/inf2 grids, sendrecv between the cores, tiles of
other programs, program_id/num_programs axes, races of the two cores on HBM. Each refusal comes at
once, at the kernel's line, from simulate and trace alike."""

import inspect
import threading
import time
import warnings

import numpy as np
import pytest
from kernel_helpers import on_chip, to_hbm

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import (
    ArgumentError,
    CapacityError,
    KernelError,
    KernelWarning,
    ShapeError,
    UnsupportedError,
)
from trnsim.nki import races

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
    """A kernel whose program 0 hands its SBUF tile to program 1 in a Python object. The event makes
    program 1 wait for it in trace-only runs too, whose cores do not wait at a core_barrier."""
    box, made = {}, threading.Event()

    @nki.jit
    def handed_over(a):
        me = nl.program_id(0)
        if me == 0:
            box["tile"] = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            made.set()
            nisa.dma_copy(dst=box["tile"], src=a)
        if grid == 2:
            nisa.core_barrier(cores=(0, 1))
        result = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        if me == 1:
            assert made.wait(10)
            nisa.dma_copy(dst=result, src=box["tile"])
        return result
    return handed_over[grid]


@pytest.mark.parametrize("grid", [2, 3])
def test_a_tile_of_another_program_is_refused(grid):
    """Core 1 of LNC=2 (and program 1 of a grid) read program 0's SBUF tile, handed over in a Python
    object: each core has its own SBUF. (Each run gets its own kernel: a tile kept from the first
    run is refused for another reason.)"""
    match = (r"test_nki_lnc.py:\d+ in handed_over: nisa.dma_copy: tile 'handed_over:\d+' was made by "
             r"another program of this launch; this is program 1")
    with pytest.raises(KernelError, match=match) as simulated:
        nki.simulate(_handed_over(grid), target="trn2")(X)
    with pytest.raises(KernelError, match=match) as traced:
        nki.trace(_handed_over(grid), SPEC, target="trn2")
    assert str(simulated.value) == str(traced.value)


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


def race_warnings(kernel):
    """The KernelWarnings of an LNC=2 launch, the same from a value run and a trace-only run."""
    found = []
    for launch in (lambda: nki.simulate(kernel[2], target="trn2")(X), lambda: nki.trace(kernel[2], SPEC,
                                                                                          target="trn2")):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            launch()
        found.append([str(w.message) for w in seen if issubclass(w.category, KernelWarning)])
    assert found[0] == found[1]
    return found[0]


def line_of(kernel, marker):
    """The line of `kernel` that holds the comment `marker`."""
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if line.rstrip().endswith(marker))


@nki.jit
def read_while_written(a):
    result = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=result, src=on_chip(a))  # write
    else:
        nisa.dma_copy(dst=nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.sbuf), src=result[:, 0:32])  # read
    return result


@nki.jit
def overlapping_writes(a):
    me = nl.program_id(0)
    result = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=result[32 * me:32 * me + 96, :], src=a[0:96, :])  # write
    return result


def test_a_read_of_what_the_other_core_writes_with_nothing_between_races():
    """Core 1 read what core 0 wrote with no barrier: silent, though on the chip it reads old or new."""
    write, read = (line_of(read_while_written, marker) for marker in ("# write", "# read"))
    assert race_warnings(read_while_written) == [
        f"test_nki_lnc.py:{read} in read_while_written: core 1 reads bytes of "
        f"'read_while_written:{write - 2}' that core 0 writes at test_nki_lnc.py:{write} in "
        f"read_while_written, with no nisa.core_barrier or nisa.sendrecv between them: the two cores of "
        f"LNC=2 race, so on the chip what core 1 reads depends on timing. Fix: a nisa.core_barrier (or a "
        f"sendrecv) between the two, or disjoint regions for the two cores"]


def test_overlapping_writes_of_the_two_cores_race():
    write = line_of(overlapping_writes, "# write")
    (message,) = race_warnings(overlapping_writes)
    assert message.startswith(f"test_nki_lnc.py:{write} in overlapping_writes: core 1 writes bytes of "
                              f"'overlapping_writes:{write - 1}' that core 0 writes at "
                              f"test_nki_lnc.py:{write}")
    assert "which write lands last depends on timing" in message


def _ordered(how):
    @nki.jit
    def ordered(a):
        me = nl.program_id(0)
        result = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        if how == "halves":  # each core its own columns, interleaved in every row
            nisa.dma_copy(dst=result[:, me * 32:(me + 1) * 32], src=a[:, me * 32:(me + 1) * 32])
            return result
        if how == "same writes":  # code both cores run whole writes the same bytes twice
            return to_hbm(on_chip(a))
        if me == 0:
            nisa.dma_copy(dst=result, src=on_chip(a))
        if how == "barrier":
            nisa.core_barrier(cores=(0, 1))
        else:
            sent, got = (nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf) for _ in range(2))
            nisa.memset(dst=sent, value=1.0)
            nisa.sendrecv(src=sent, dst=got, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
        if me == 1:
            nisa.dma_copy(dst=result, src=on_chip(result))
        return result
    return ordered


@pytest.mark.parametrize("how", ["barrier", "sendrecv", "halves", "same writes"])
def test_accesses_ordered_by_a_meeting_or_disjoint_do_not_race(how):
    """Both cores also read all of the same input `a`."""
    assert race_warnings(_ordered(how)) == []



@nki.jit
def read_then_update_both(a):
    """Code both cores run whole: the same write, a barrier, then read it and write it back."""
    result = to_hbm(on_chip(a))
    nisa.core_barrier(cores=(0, 1))
    tile = nl.ndarray(result.shape, dtype=result.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=result)  # read
    nisa.dma_copy(dst=result, src=tile)  # write back
    return result


def test_a_read_before_its_own_copy_of_a_twin_write_races_with_the_other_copy():
    """Both cores write `result` from one line (twins, taken to write the same values), but core 1
    may read it before core 0's write-back lands, which its own write-back does not cover."""
    read = line_of(read_then_update_both, "# read")
    messages = race_warnings(read_then_update_both)
    assert [m.split(" in ")[0] for m in messages] == [f"test_nki_lnc.py:{read}"]
    assert "core 1 reads" in messages[0]


@nki.jit
def transposed_halves(a):
    """Each core writes its own half of the columns through a transposed view."""
    me = nl.program_id(0)
    result = nl.ndarray((64, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    tile = on_chip(a[:, 0:64])
    nisa.dma_copy(dst=result[me * 32:(me + 1) * 32, :].permute((1, 0)), src=tile[:, me * 32:(me + 1) * 32])
    return result


def test_transposed_accesses_are_compared_byte_by_byte_and_cheaply():
    assert race_warnings(transposed_halves) == []
    trace = nki.trace(transposed_halves[2], SPEC, target="trn2")
    runs = races._runs(trace[-1].outputs[0])
    assert len(runs) == 1  # one contiguous range, not one per element


@nki.jit
def scatter_and_write(a, rows):
    """Core 0 scatters to the rows `rows` holds (64..127), core 1 writes rows 0..63: disjoint, though
    the trace holds the scatter's base rows 0..63 (an indirect DMA's rows are values)."""
    me = nl.program_id(0)
    result = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    tile = on_chip(a[0:64, :])
    if me == 0:
        nisa.dma_copy(dst=result.vector_select(0, on_chip(rows)), src=tile)
    else:
        nisa.dma_copy(dst=result[0:64, :], src=tile)
    return result


def test_an_indirect_dma_is_left_out_of_the_race_check():
    rows = np.arange(64, 128, dtype=np.int32).reshape(64, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelWarning)
        nki.simulate(scatter_and_write[2], target="trn2")(X, rows)

def test_without_the_meeting_the_same_accesses_race():
    """The ordered kernel minus its barrier: so the tests above can see a race."""
    @nki.jit
    def unordered(a):
        me = nl.program_id(0)
        result = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        if me == 0:
            nisa.dma_copy(dst=result, src=on_chip(a))
        if me == 1:
            nisa.dma_copy(dst=result, src=on_chip(result))
        return result
    messages = race_warnings(unordered)
    assert len(messages) == 2 and "core 1 reads" in messages[0] and "core 1 writes" in messages[1]
