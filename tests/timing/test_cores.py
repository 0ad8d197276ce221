"""Traces of several programs or cores: a grid shares the launch's physical cores, LNC=2 cores meet
at barriers and sendrecv, and a trace is refused on a core without a feature it uses."""

import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core.trace import Trace
from trnsim.errors import ConfigError, KernelWarning
from trnsim.nki import TensorSpec
from trnsim.timing.profile import summarize
from trnsim.timing.schedule import schedule


@nki.jit
def _split_work(a):
    """64 activations in all, split over the grid's programs."""
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    for _ in range(64 // nl.num_programs(0)):
        nisa.activation(dst=t, data=t, op=nl.exp)
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=out, src=t)
    return out


def test_a_grid_larger_than_the_launch_runs_its_programs_on_the_launch_cores():
    spec = TensorSpec((128, 512), "float32")
    one = schedule(nki.trace(_split_work, spec, target="trn2"))
    grid = schedule(nki.trace(_split_work[16], spec, target="trn2"))
    assert sum("scalar" in lane for lane in grid.lanes) == 1
    scalar_busy = summarize(grid).engines["scalar"].busy_s
    assert scalar_busy == pytest.approx(summarize(one).engines["scalar"].busy_s)
    assert grid.latency_s >= scalar_busy


@nki.jit
def _meet(a):
    """Core 1 works before the barrier; then the cores swap tiles."""
    out = nl.ndarray((256, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    r = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[pid * 128:(pid + 1) * 128, :])
    if pid == 1:
        for _ in range(40):
            nisa.activation(dst=t, data=t, op=nl.tanh)
    nisa.core_barrier(t, (0, 1))
    nisa.sendrecv(src=t, dst=r, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    nisa.dma_copy(dst=out[pid * 128:(pid + 1) * 128, :], src=r)
    return out


def test_lnc2_cores_meet_at_a_barrier_and_a_receive_waits_for_its_sender():
    trace = nki.trace(_meet[2], TensorSpec((256, 512)), target="trn2")
    timeline = schedule(trace)
    at = {(ins.core, ins.opcode.value): i for i, ins in enumerate(trace)}
    work = max(timeline.end_s[i] for i, ins in enumerate(trace) if ins.opcode.value == "activation")
    barriers = [timeline.start_s[at[(core, "core_barrier")]] for core in (0, 1)]
    assert barriers[0] == barriers[1] >= work
    for core in (0, 1):
        receive, send = at[(core, "sendrecv")], at[(1 - core, "sendrecv")]
        barrier = at[(core, "core_barrier")]
        assert timeline.start_s[receive] >= max(timeline.start_s[send], timeline.end_s[barrier])
    with pytest.raises(ConfigError, match="LNC=2"):
        schedule(trace, "trn1")


@nki.jit
def _double_row(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.ndarray((128, 2, 128), dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray((128, 2, 512), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=ta, moving=tb, perf_mode="double_row")
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_double_row_flops_belong_to_the_instruction_and_trn1_refuses_it():
    trace = nki.trace(_double_row, TensorSpec((128, 2, 128), "float8_e4m3"),
                      TensorSpec((128, 2, 512), "float8_e4m3"), target="trn2")
    flops = {target: summarize(schedule(trace, target)).flops for target in ("trn2", "trn3")}
    assert flops["trn2"] == flops["trn3"] == 2 * 256 * 128 * 512     # K = 128 partitions x 2 rows
    with pytest.raises(ConfigError, match="double_row"):
        schedule(trace, "trn1")


@nki.jit
def barrier_then_new_engine(a):
    out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    tile = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a[pid * 128:(pid + 1) * 128, :])
    other = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=other, src=a[0:128, :])
    if pid == 1:
        for _ in range(40):
            nisa.activation(dst=tile, data=tile, op=nl.tanh)
    nisa.core_barrier(tile, (0, 1))
    result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=result, data=other)  # the Vector engine's first instruction
    nisa.dma_copy(dst=out[pid * 128:(pid + 1) * 128, :], src=result)
    return out


def test_work_after_a_barrier_waits_for_it_on_an_engine_first_used_after_it():
    """Only lanes that existed at the barrier were held: a first Vector instruction after it
    started at the beginning of the kernel."""
    trace = nki.trace(barrier_then_new_engine[2], TensorSpec((256, 512)), target="trn2")
    timeline = schedule(trace)
    ends = {ins.core: timeline.end_s[i] for i, ins in enumerate(trace) if ins.opcode.value == "core_barrier"}
    for i, ins in enumerate(trace):
        if ins.opcode.value == "reciprocal":
            assert timeline.start_s[i] >= ends[ins.core]
            assert trace[timeline.waited_on[i]].opcode.value == "core_barrier"


@nki.jit
def _update_in_place(a):
    """Both cores write `out`, meet, then read it and write it back (the second part races, and
    warns): where the trace happened to interleave the cores once made the schedule loop forever."""
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.core_barrier(cores=(0, 1))
    nisa.dma_copy(dst=out, src=t)
    nisa.core_barrier(cores=(0, 1))
    u = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=out)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_the_cores_are_ordered_only_where_they_meet_not_by_trace_order():
    with pytest.warns(KernelWarning, match="race"):
        trace = nki.trace(_update_in_place[2], TensorSpec((128, 64)), target="trn2")
    for order in (trace, Trace(trace.target, sorted(trace, key=lambda ins: -ins.core), cores=2)):
        timeline = schedule(order)  # returned: it used to reschedule forever
        starts = {}
        for index, ins in enumerate(order):
            starts.setdefault(ins.core, []).append(timeline.start_s[index])
        assert starts[0] == starts[1]  # both cores run the same code, and nothing else orders them
