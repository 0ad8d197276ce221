"""The scheduler: engine order, memory dependencies, DMA queues, re-timing across generations."""

import pytest
from timing_builders import compute_bound_trace, dma_bound_trace, instr, load, matmul, region

from trnsim import hardware
from trnsim.core.isa import Engine, Memory, Opcode
from trnsim.core.trace import Region, Trace
from trnsim.errors import ConfigError, UnsupportedError
from trnsim.timing.costs import instruction_seconds, issue_latency_s
from trnsim.timing.perfetto import chrome_trace
from trnsim.timing.profile import summarize
from trnsim.timing.schedule import latency_s, schedule

SBUF, PSUM, HBM = Memory.SBUF, Memory.PSUM, Memory.HBM


def _copy(dst, src, engine=Engine.VECTOR):
    return instr(Opcode.TENSOR_COPY, engine, [dst], [src])


def _buffer_regions(buffer: int, count: int = 2, free: int = 512):
    return [region(SBUF, free, buffer=buffer, offset=i * free) for i in range(count)]


def test_one_engine_runs_its_instructions_in_program_order_hiding_the_next_access():
    """The first pays its SBUF access overhead; the second's overlaps the first ([S9]: engines
    hide it through instruction-level parallelism)."""
    a, b = _copy(region(SBUF, 512), region(SBUF, 512)), _copy(region(SBUF, 512), region(SBUF, 512))
    timeline = schedule(Trace("trn1", [a, b]), "trn1")
    access_s = issue_latency_s(a, hardware.core("trn1"))
    assert access_s > 0
    assert timeline.start_s.tolist() == [access_s, timeline.end_s[0]]


def test_independent_instructions_on_different_engines_overlap():
    a = _copy(region(SBUF, 512), region(SBUF, 512), Engine.VECTOR)
    b = instr(Opcode.ACTIVATION, Engine.SCALAR, [region(SBUF, 512)], [region(SBUF, 512)])
    timeline = schedule(Trace("trn1", [a, b]), "trn1")
    core = hardware.core("trn1")
    assert timeline.start_s.tolist() == [issue_latency_s(a, core), issue_latency_s(b, core)]


def test_read_after_write_waits_for_the_writer_its_access_and_the_semaphore():
    tile = region(SBUF, 512)
    core = hardware.core("trn1")
    copy = _copy(region(SBUF, 512), tile)
    trace = Trace("trn1", [load(tile, region(HBM, 512)), copy])
    timeline = schedule(trace, core)
    semaphore_s = core.costs.static_overhead_cycles / core.engines["vector"].clock_hz
    assert timeline.start_s[1] == pytest.approx(timeline.end_s[0] + issue_latency_s(copy, core) + semaphore_s)
    assert timeline.waited_on[1] == 0


def test_write_after_read_waits_for_the_reader():
    tile = region(SBUF, 4096)
    slow_reader = _copy(region(SBUF, 4096), tile)
    overwrite = instr(Opcode.ACTIVATION, Engine.SCALAR, [tile], [region(SBUF, 64)])
    timeline = schedule(Trace("trn1", [slow_reader, overwrite]), "trn1")
    assert timeline.start_s[1] >= timeline.end_s[0]


def test_write_after_write_keeps_the_order_of_two_writers():
    tile = region(SBUF, 4096)
    first = _copy(tile, region(SBUF, 4096))
    second = instr(Opcode.ACTIVATION, Engine.SCALAR, [tile], [region(SBUF, 64)])
    timeline = schedule(Trace("trn1", [first, second]), "trn1")
    assert timeline.start_s[1] >= timeline.end_s[0]


def test_disjoint_parts_of_one_allocation_do_not_depend_on_each_other():
    left, right = _buffer_regions(buffer=77)
    writer = _copy(left, region(SBUF, 512), Engine.VECTOR)
    reader = instr(Opcode.ACTIVATION, Engine.SCALAR, [region(SBUF, 512)], [right])
    timeline = schedule(Trace("trn1", [writer, reader]), "trn1")
    assert timeline.start_s[1] == issue_latency_s(reader, hardware.core("trn1"))


def test_disjoint_partitions_of_one_allocation_do_not_depend_on_each_other():
    top = region(SBUF, 512, partitions=64, buffer=78)
    bottom = region(SBUF, 512, partitions=64, partition_start=64, buffer=78)
    writer = _copy(top, region(SBUF, 512, partitions=64), Engine.VECTOR)
    reader = instr(Opcode.ACTIVATION, Engine.SCALAR, [region(SBUF, 512, partitions=64)], [bottom])
    start = schedule(Trace("trn1", [writer, reader]), "trn1").start_s[1]
    assert start == issue_latency_s(reader, hardware.core("trn1"))


def test_dmas_spread_over_the_queues_and_the_next_one_waits_for_a_free_queue():
    core = hardware.core("trn2")
    loads = [load(region(SBUF, 2048), region(HBM, 2048)) for _ in range(core.dma_queues + 1)]
    timeline = schedule(Trace("trn2", loads), core)
    # every queue starts once the descriptor and semaphore latency has passed
    assert timeline.start_s[:-1] == pytest.approx([core.dma_fixed_latency_s] * core.dma_queues)
    assert len(set(timeline.lane[:-1].tolist())) == core.dma_queues
    assert timeline.start_s[-1] == pytest.approx(timeline.end_s[0])


def test_the_issue_latency_of_a_dma_overlaps_the_transfer_ahead_of_it():
    core = hardware.core("trn1")
    pinned = [load(region(SBUF, 2048), region(HBM, 2048), queue=0) for _ in range(3)]
    timeline = schedule(Trace("trn1", pinned), core)
    assert timeline.start_s[0] == pytest.approx(core.dma_fixed_latency_s)
    assert timeline.start_s[1:].tolist() == pytest.approx(timeline.end_s[:-1].tolist())


def test_a_dma_that_waits_for_data_pays_its_issue_latency_after_the_data_is_ready():
    core = hardware.core("trn1")
    tile = region(SBUF, 2048)
    trace = Trace("trn1", [_copy(tile, region(SBUF, 2048)), load(region(HBM, 2048), tile)])
    timeline = schedule(trace, core)
    assert timeline.start_s[1] == pytest.approx(timeline.end_s[0] + core.dma_fixed_latency_s)


def test_a_named_queue_is_used_and_a_missing_one_is_refused():
    pinned = [load(region(SBUF, 2048), region(HBM, 2048), queue=3) for _ in range(2)]
    timeline = schedule(Trace("trn1", pinned), "trn1")
    assert [timeline.lanes[k] for k in timeline.lane] == ["dma3", "dma3"]
    assert timeline.start_s[1] == pytest.approx(timeline.end_s[0])
    with pytest.raises(ConfigError, match="queue 99"):
        schedule(Trace("trn1", [load(region(SBUF, 64), region(HBM, 64), queue=99)]), "trn1")


def test_a_store_that_waits_for_data_leaves_the_first_free_queue_to_a_ready_load():
    busy = [load(region(SBUF, 2048 + 64 * q), region(HBM, 2048 + 64 * q)) for q in range(16)]
    tile = region(SBUF, 65536)
    compute = _copy(tile, region(SBUF, 65536))  # ends after every one of the loads
    store = load(region(HBM, 65536), tile)
    ready = load(region(SBUF, 2048), region(HBM, 2048))
    timeline = schedule(Trace("trn1", [*busy, compute, store, ready]), "trn1")
    assert timeline.end_s[15] < timeline.end_s[16]
    assert timeline.start_s[-1] == pytest.approx(timeline.end_s[0])  # the queue that freed first
    assert timeline.lane[-2] == timeline.lane[15]  # the store took the queue free last


def test_accumulating_matmuls_issue_back_to_back():
    acc = region(PSUM, 512, dtype="float32")
    lhs, rhs = region(SBUF, 128), region(SBUF, 512)
    trace = Trace("trn1", [matmul(acc, lhs, rhs) for _ in range(4)])
    timeline = schedule(trace, "trn1")
    each = instruction_seconds(trace[0], "trn1")
    assert timeline.latency_s == pytest.approx(issue_latency_s(trace[0], hardware.core("trn1")) + 4 * each)


def test_the_critical_path_runs_from_the_first_to_the_last_instruction_of_a_chain():
    timeline = schedule(compute_bound_trace(tiles=8), "trn1")
    path = timeline.critical_path()
    assert path[-1] == len(timeline.trace) - 1
    assert timeline.end_s[path[-1]] == timeline.latency_s
    pairs = zip(path[:-1], path[1:], strict=True)
    assert all(timeline.start_s[b] >= timeline.end_s[a] - 1e-15 for a, b in pairs)


def test_compute_bound_kernels_follow_the_tensor_engine_clock():
    trace = compute_bound_trace(tiles=2048)
    times = {target: latency_s(trace, target) for target in ("trn1", "trn2", "trn3")}
    clocks = {t: hardware.core(t).engines["tensor"].clock_hz for t in times}
    # NC-v2 clocks its PE array at 2.8 GHz, NC-v3/v4 at 2.4 GHz: trn1 is the fastest here
    assert times["trn1"] < times["trn2"]
    assert times["trn2"] / times["trn1"] == pytest.approx(clocks["trn1"] / clocks["trn2"], rel=0.05)
    assert times["trn3"] == pytest.approx(times["trn2"], rel=0.05)


def test_dma_bound_kernels_follow_the_dma_queue_rate():
    trace = dma_bound_trace(tiles=256)
    times = {target: latency_s(trace, target) for target in ("trn1", "trn2", "trn3")}
    assert times["trn1"] > times["trn2"] > times["trn3"]
    rates = {t: hardware.core(t).dma_bytes_per_s_per_queue for t in times}
    assert times["trn1"] / times["trn3"] == pytest.approx(rates["trn3"] / rates["trn1"], rel=0.15)


def test_the_trace_is_timed_for_its_own_target_by_default():
    trace = dma_bound_trace("trn3", tiles=4)
    assert schedule(trace).latency_s == schedule(trace, "trn3").latency_s
    assert schedule(trace).target == "trn3"


def _hbm_tile(buffer: int, row: int, column: int, rows: int = 128, columns: int = 512,
              pitch: int = 4096):
    """A rows x columns window of a row-major HBM tensor with `pitch` elements per row."""
    return Region(memory=HBM, buffer=buffer, name="out", address_bytes=0, partition_start=0,
                  partition_count=1, pattern=((pitch, rows), (1, columns)),
                  offset=row * pitch + column, dtype="bfloat16", dtype_bytes=2)


def test_stores_to_neighbouring_column_tiles_of_one_hbm_tensor_are_independent():
    stores = [load(_hbm_tile(55, 0, 512 * n), region(SBUF, 512)) for n in range(3)]
    timeline = schedule(Trace("trn1", stores), "trn1")
    assert (timeline.waited_on == -1).all()
    assert timeline.start_s.tolist() == pytest.approx([timeline.start_s[0]] * 3)


def test_reading_back_an_hbm_tile_waits_for_the_store_that_wrote_it():
    store = load(_hbm_tile(56, 128, 512), region(SBUF, 512))
    other = load(region(SBUF, 512), _hbm_tile(56, 0, 512))       # rows above: independent
    overlapping = load(region(SBUF, 64), _hbm_tile(56, 200, 600, rows=8, columns=64))
    timeline = schedule(Trace("trn1", [store, other, overlapping]), "trn1")
    assert timeline.start_s[1] == timeline.start_s[0]
    assert timeline.start_s[2] >= timeline.end_s[0]
    assert timeline.waited_on[2] == 0


def test_retiming_an_instruction_the_older_generation_lacks_is_refused():
    x4 = "float8_e4m3fn_x4"
    mx = instr(Opcode.MATMUL_MX, Engine.TENSOR, [region(PSUM, 512, dtype="float32")],
               [region(SBUF, 128, dtype=x4), region(SBUF, 512, dtype=x4)])
    trace = Trace("trn3", [mx])
    assert schedule(trace, "trn3").latency_s > 0
    with pytest.raises(UnsupportedError, match="nisa.nc_matmul_mx needs NeuronCore-v4"):
        schedule(trace, "trn2")


def test_instructions_of_one_kind_with_different_parameters_get_their_own_costs():
    core = hardware.core("trn1")
    copies = [_copy(region(SBUF, 512), region(SBUF, 512), Engine.VECTOR) for _ in range(2)]
    copies += [instr(Opcode.TENSOR_COPY, Engine.VECTOR, [region(SBUF, 512)], [region(SBUF, 512)],
                     dynamic_offset=flag) for flag in (True, False, True, [1])]  # a list: unhashable
    timeline = schedule(Trace("trn1", copies), core)
    expected = [float(instruction_seconds(ins, core)) for ins in copies]
    assert timeline.duration_s.tolist() == pytest.approx(expected)
    assert expected[2] != expected[3] and expected[5] == expected[2]


def test_a_write_over_several_written_boxes_replaces_them_for_later_readers():
    left, right = _buffer_regions(buffer=88)
    whole = region(SBUF, 1024, buffer=88)
    trace = Trace("trn1", [
        _copy(left, region(SBUF, 512), Engine.VECTOR),
        instr(Opcode.ACTIVATION, Engine.SCALAR, [right], [region(SBUF, 512)]),
        _copy(whole, region(SBUF, 1024), Engine.VECTOR),
        instr(Opcode.ACTIVATION, Engine.SCALAR, [region(SBUF, 512)], [right]),
        instr(Opcode.ACTIVATION, Engine.SCALAR, [region(SBUF, 512)], [left])])
    timeline = schedule(trace, "trn1")
    assert timeline.start_s[2] >= max(timeline.end_s[0], timeline.end_s[1])
    assert timeline.waited_on[3] == 2 and timeline.start_s[3] > timeline.end_s[2]
    assert timeline.waited_on[4] in (2, 3) and timeline.start_s[4] >= timeline.end_s[2]


def test_a_partition_broadcast_copy_runs_on_the_tensor_engine():
    """nl.broadcast_to of a [1, F] tile reads 128 partitions of a 1-partition allocation: the
    compiler makes it a matmul by ones on TensorE, so VectorE stays free (issue 14)."""
    from timing_builders import instr, load, region

    from trnsim.core.isa import Engine, Memory, Opcode
    from trnsim.core.trace import Trace

    row = region(Memory.SBUF, 512, partitions=1, dtype="float32", buffer=1)
    spread = region(Memory.SBUF, 512, partitions=128, dtype="float32", buffer=1)  # the broadcast view
    full = region(Memory.SBUF, 512, partitions=128, dtype="float32", buffer=2)
    trace = Trace("trn1", [
        load(row, region(Memory.HBM, 512, partitions=1, dtype="float32")),
        load(full, region(Memory.HBM, 512, dtype="float32")),
        instr(Opcode.TENSOR_COPY, Engine.VECTOR, [region(Memory.SBUF, 512, dtype="float32")], [spread]),
        instr(Opcode.TENSOR_COPY, Engine.VECTOR, [region(Memory.SBUF, 512, dtype="float32")], [full]),
    ])
    timeline = schedule(trace, "trn1")
    assert [timeline.lanes[lane] for lane in timeline.lane[2:].tolist()] == ["tensor", "vector"]
    events = [e for e in chrome_trace({"k": timeline})["traceEvents"] if e["ph"] == "X"]
    engines = [(e["cat"], e["args"]["engine"]) for e in events[2:]]
    assert engines == [("tensor", "tensor"), ("vector", "vector")]
    top = {hotspot.opcode + " " + hotspot.engine for hotspot in summarize(timeline).top}
    assert "tensor_copy tensor" in top and "tensor_copy vector" in top


@pytest.mark.parametrize("free, passes", [(512, 1), (1024, 2)])
def test_a_tensor_tensor_reading_a_broadcast_streams_it_from_psum_when_it_fits_a_bank(free, passes):
    """TensorE writes PSUM, so the consumer of a broadcast that fits one PSUM bank (512 fp32)
    takes tensor_tensor's one-pass cost (N cycles); a wider one is no PSUM tile, goes to SBUF,
    and the consumer takes two passes (2N) like any two SBUF operands."""
    row = region(SBUF, free, partitions=1, dtype="float32", buffer=11)
    spread = region(SBUF, free, dtype="float32", buffer=11)  # the broadcast view of `row`
    bcast, other = region(SBUF, free, dtype="float32", buffer=12), region(SBUF, free, dtype="float32")
    def multiply(a, b):
        return instr(Opcode.TENSOR_TENSOR, Engine.VECTOR, [region(SBUF, free, dtype="float32")], [a, b],
                     op="multiply")
    trace = Trace("trn1", [load(row, region(HBM, free, partitions=1, dtype="float32")),
                           _copy(bcast, spread), multiply(other, bcast), multiply(other, other)])
    timeline = schedule(trace, "trn1")
    assert timeline.lanes[timeline.lane[1]] == "tensor"
    after_broadcast, two_sbuf = timeline.duration_s[2], timeline.duration_s[3]
    assert two_sbuf == pytest.approx(instruction_seconds(trace[3], "trn1"))
    assert after_broadcast == pytest.approx(two_sbuf * passes / 2)


def test_a_spill_runs_on_the_spill_queue_at_the_whole_core_dma_rate():
    """A compiler spill is served by every DMA engine (a published profile reloads a spilled
    4 MiB tile in about 17 us: aws-neuron-sdk nki/img/mamba_v2_8K_seqlen_zoomed.png); a kernel DMA
    holds one queue at one engine's rate."""
    core = hardware.core("trn1")
    tile = region(SBUF, 8192, dtype="float32")
    spill = load(region(HBM, 8192, dtype="float32"), tile, spill="store")
    plain = load(region(HBM, 8192, dtype="float32"), region(SBUF, 8192, dtype="float32"))
    timeline = schedule(Trace("trn1", [spill, plain]), core)
    assert timeline.lanes[timeline.lane[0]] == "dma_spill"
    assert timeline.duration_s[0] == pytest.approx(timeline.duration_s[1] / core.dma_queues)
    assert timeline.duration_s[0] < 20e-6  # the 4 MiB tile, as in the published profile


def test_writing_halves_then_the_whole_tile_twice_is_scheduled():
    """A tile written by halves, whole, by half and whole again: the dependency index once lost
    track of a box after every box had been dropped (a KeyError on the second whole write)."""
    left, right = _buffer_regions(buffer=91)
    whole = region(SBUF, 1024, buffer=91)
    writes = [left, right, whole, left, whole]
    trace = Trace("trn1", [_copy(dst, region(SBUF, dst.elements_per_partition)) for dst in writes])
    timeline = schedule(trace, "trn1")
    assert all(timeline.start_s[k + 1] >= timeline.end_s[k] for k in (1, 2, 3))
