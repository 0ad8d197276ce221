"""The report's usage strips: SBUF/PSUM occupancy counts each placement of a tile once, over its
own lifetime, and a schedule that holds more than the memory has is flagged in the page; the DMA
bandwidth never shows more than the core's rate."""

from golden_timings import tutorial_module
from timing_builders import instr, load, region

import trnsim.nki as nki
from trnsim.core.isa import Engine, Memory, Opcode
from trnsim.core.trace import Trace
from trnsim.nki import TensorSpec
from trnsim.timing.profile import profile_trace
from trnsim.timing.report_html import report_html, usage_series
from trnsim.timing.schedule import schedule


def test_a_spilled_tile_is_held_at_one_address_at_a_time_and_not_while_in_hbm():
    tile = region(Memory.SBUF, 512, buffer=1)                        # 1 KiB per partition at 0
    moved = tile._replace(address_bytes=4096)                        # its reload lands at 4 KiB
    other = region(Memory.SBUF, 512, buffer=2)                       # a new tile on its old bytes
    hbm = region(Memory.HBM, 512)
    trace = Trace("trn2", [instr(Opcode.MEMSET, Engine.VECTOR, [tile], [], value=0.0),
                           load(hbm, tile, spill="store"), load(moved, hbm, spill="reload"),
                           instr(Opcode.TENSOR_COPY, Engine.VECTOR, [other], [moved]),
                           load(region(Memory.HBM, 512), other)])
    timeline = schedule(trace)
    usage = usage_series(timeline, slices=1000)
    assert max(usage["sbuf"]) == 2048            # the copy: the reloaded tile and its output
    store_end, reload_start = timeline.end_s[1], timeline.start_s[2]
    between = (store_end + reload_start) / 2 / timeline.latency_s * 1000
    if reload_start > store_end:                 # nothing is held while the tile is in HBM
        assert usage["sbuf"][int(between)] == 0


def test_the_readme_kernel_never_shows_more_than_capacity_unflagged():
    module = tutorial_module()
    trace = nki.trace(module.matmul_blocked_mnk, TensorSpec((4096, 2048), "bfloat16"),
                      TensorSpec((4096, 2048), "bfloat16"), target="trn1")
    results = profile_trace(trace, "trn1")
    usage = usage_series(results["trn1"][0])
    page = report_html(results)
    for memory in ("sbuf", "psum"):
        over = max(usage[memory]) > usage[f"{memory}_capacity"]
        assert over == (f"{memory.upper()}: the modelled schedule holds up to" in page)


def test_the_bandwidth_strip_never_shows_more_than_the_core_has_beside_a_spill():
    core_rate = schedule(Trace("trn2", [])).core.dma_bytes_per_s
    loads = [load(region(Memory.SBUF, 4096, dtype="float32"), region(Memory.HBM, 4096, dtype="float32"))
             for _ in range(16)]
    spill = load(region(Memory.HBM, 4096, dtype="float32"), region(Memory.SBUF, 4096, dtype="float32"),
                 spill="store")
    usage = usage_series(schedule(Trace("trn2", [*loads, spill])))
    assert 0.9 * core_rate <= max(usage["dma_gbps"]) * 1e9 <= core_rate * (1 + 1e-9)


def test_the_bandwidth_strip_counts_the_bytes_the_summary_counts_not_a_collective_s():
    import numpy as np

    import trnsim.nki.collectives as ncc
    import trnsim.nki.isa as nisa
    import trnsim.nki.language as nl
    from trnsim.system.launch import launch

    @nki.jit
    def reduce_all(x):
        group = ncc.ReplicaGroup([[0, 1]])
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        summed = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=src, src=x)
        ncc.all_reduce(srcs=[src], dsts=[summed], replica_group=group, op=nl.add)
        nisa.dma_copy(dst=out, src=summed)
        return out

    x = np.ones((256, 1024), np.float32)
    trace = launch(reduce_all, 2, [(x,), (x,)]).traces[0]
    timeline, summary = profile_trace(trace, "trn2")["trn2"]
    usage = usage_series(timeline, slices=4000)
    slice_s = timeline.latency_s / 4000
    strip_bytes = sum(usage["dma_gbps"]) * 1e9 * slice_s
    assert summary.dma_bytes == 2 * x.nbytes
    assert abs(strip_bytes - summary.dma_bytes) < 0.01 * summary.dma_bytes


def test_an_empty_kernel_says_the_same_of_hfu_and_mfu():
    page = report_html(profile_trace(Trace("trn2", []), "trn2"))
    assert page.count("- (the kernel takes no time)") == 2


def test_a_grids_programs_on_one_core_add_up_in_its_memory():
    """Occupancy was kept per program and the fullest program shown, so four programs sharing a
    core's SBUF showed one program's tile."""
    import trnsim.nki.isa as nisa
    import trnsim.nki.language as nl

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a)
        nisa.activation(dst=tile, data=tile, op=nl.exp)
        nisa.dma_copy(dst=out, src=tile)
        return out

    spec = TensorSpec((128, 1024), "float32")
    one = max(usage_series(schedule(nki.trace(kernel, spec, target="trn2")))["sbuf"])
    timeline = schedule(nki.trace(kernel[4], spec, target="trn2"))
    programs = [[i for i, ins in enumerate(timeline.trace) if ins.core == p] for p in range(4)]
    starts = [timeline.start_s[indices].min() for indices in programs]
    ends = [timeline.end_s[indices].max() for indices in programs]
    overlapping = sum(start < min(ends) for start in starts)  # programs live at the first one's end
    assert max(usage_series(timeline, slices=2000)["sbuf"]) >= overlapping * one > one
