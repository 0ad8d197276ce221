"""On-chip placement as the compiler does it: lifetimes end at the last use, spills, address= reuse."""

import warnings

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import config, hardware
from trnsim.core.isa import Memory
from trnsim.errors import HazardError, KernelWarning

SBUF = hardware.core("trn2").sbuf_bytes_per_partition
WIDE = SBUF * 2 // 5 // 4  # fp32 elements of a tile holding 40% of a partition


def sbuf_regions(trace):
    return [r for ins in trace for r in ins.outputs + ins.inputs if r.memory is Memory.SBUF]


def test_a_loop_that_keeps_each_large_tile_runs_when_each_is_done_before_the_next():
    """Ten tiles of 60% of a partition, all kept in a list: Python holds them all, the compiler
    frees each after its copy out, so they share one place."""
    width = SBUF * 3 // 5 // 4

    def kernel(x):
        out = nl.ndarray((10, 128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        kept = []
        for step in range(10):
            tile = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=tile, value=float(step))
            nisa.dma_copy(dst=out[step], src=tile[:, 0:4])
            kept.append(tile)
        return out

    result = nki.simulate(kernel, target="trn2")(np.zeros(1, np.float32))
    np.testing.assert_array_equal(result[:, 0, 0], np.arange(10))
    trace = nki.trace(kernel, np.zeros(1, np.float32), target="trn2")
    assert {r.address_bytes for r in sbuf_regions(trace)} == {0}  # placed again over their lifetimes
    assert not [ins for ins in trace if ins.param("spill")]


def spilling_kernel(x):
    """a and b are written, then c is needed with a while b waits: one of the three must go to HBM."""
    out = nl.ndarray((3, 128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b, c = (nl.ndarray((128, WIDE), dtype=nl.float32, buffer=nl.sbuf, name=n) for n in "abc")
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=2.0)
    nisa.tensor_tensor(dst=c, data1=a, data2=a, op=nl.add)  # MARK-SPILL
    nisa.dma_copy(dst=out[0], src=c[:, 0:4])
    nisa.dma_copy(dst=out[1], src=a[:, 0:4])
    nisa.dma_copy(dst=out[2], src=b[:, 0:4])
    return out


def test_live_data_over_sbuf_spills_the_tile_needed_last_and_reloads_it():
    result = nki.simulate(spilling_kernel, target="trn2")(np.zeros(1, np.float32))
    np.testing.assert_array_equal(result[:, 0, 0], [2.0, 1.0, 2.0])
    trace = nki.trace(spilling_kernel, np.zeros(1, np.float32), target="trn2")
    spills = [ins.name for ins in trace if ins.param("spill")]
    assert spills == ["spill store b", "spill reload b"]  # b is the tile needed furthest ahead
    store = next(ins for ins in trace if ins.param("spill") == "store")
    assert store.where.line == _line("MARK-SPILL") and store.outputs[0].memory is Memory.HBM
    assert store.outputs[0].bytes == 128 * WIDE * 4  # the whole tile goes out and comes back
    assert all(r.address_bytes + WIDE * 4 <= SBUF for r in sbuf_regions(trace))


def test_the_timeline_pays_for_the_spill():
    from trnsim.timing.schedule import schedule
    trace = nki.trace(spilling_kernel, np.zeros(1, np.float32), target="trn2")
    timeline = schedule(trace)
    spilled = [k for k, ins in enumerate(trace) if ins.param("spill")]
    assert len(spilled) == 2 and (timeline.duration_s[spilled] > 0).all()
    without = schedule(type(trace)(trace.target, [ins for ins in trace if not ins.param("spill")]))
    assert timeline.latency_s > without.latency_s


def placement_of(trace) -> list:
    return [(ins.opcode, ins.name, [(r.name, r.address_bytes) for r in ins.outputs + ins.inputs])
            for ins in trace]


def test_simulate_and_trace_only_record_the_same_placement():
    kernel = nki.jit(spilling_kernel)
    nki.simulate(kernel, target="trn2")(np.zeros(1, np.float32))
    traced = nki.trace(spilling_kernel, np.zeros(1, np.float32), target="trn2")
    assert placement_of(kernel.last_trace) == placement_of(traced)


def reuse_kernel(read_after_overwrite: bool):
    def kernel(x):
        out = nl.ndarray((2, 128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        first = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=0, name="first")
        nisa.memset(dst=first, value=1.0)
        if not read_after_overwrite:
            nisa.dma_copy(dst=out[0], src=first[:, 0:4])
        second = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=0, name="second")
        nisa.memset(dst=second, value=2.0)
        nisa.dma_copy(dst=out[1], src=second[:, 0:4])
        if read_after_overwrite:
            nisa.dma_copy(dst=out[0], src=first[:, 0:4])  # MARK-STALE
        return out
    return kernel


def test_an_address_reused_while_python_still_holds_the_first_tile_is_honoured():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = nki.simulate(reuse_kernel(False), target="trn2")(np.zeros(1, np.float32))
    np.testing.assert_array_equal(result[:, 0, 0], [1.0, 2.0])


def test_reading_bytes_another_tile_overwrote_warns_and_strict_mode_refuses():
    with pytest.warns(KernelWarning, match="reads tile 'first'.*wrote over those bytes") as seen:
        nki.simulate(reuse_kernel(True), target="trn2")(np.zeros(1, np.float32))
    assert f":{_line('MARK-STALE')}" in str(seen[0].message)
    with config.override(strict=True), pytest.raises(HazardError, match="wrote over those bytes") as caught:
        nki.simulate(reuse_kernel(True), target="trn2")(np.zeros(1, np.float32))
    assert caught.value.where.line == _line("MARK-STALE")


def _line(marker: str) -> int:
    with open(__file__) as source:
        return next(n for n, text in enumerate(source, start=1) if marker in text and "_line(" not in text)
