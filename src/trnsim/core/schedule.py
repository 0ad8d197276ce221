"""Engine queues plus memory dependencies -> a timeline: when each instruction ran, and where.

Each engine runs its own instructions in program order. An instruction starts when its engine
(or DMA queue) is free and every instruction it depends on has finished: read-after-write,
write-after-read and write-after-write on overlapping bytes of the same allocation. A DMA goes to
the queue the kernel named, else to the queue that frees first. An instruction that had to wait
for data also pays the static semaphore overhead of its engine. Costs come from `core.timing`, so
the same trace can be timed for any generation without re-running the kernel.

    >>> timeline = schedule(trace, "trn2")
    >>> timeline.latency_s
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.core.isa import MATMUL, Engine
from trnsim.core.timing import COST, core_spec
from trnsim.core.trace import Instruction, Trace
from trnsim.errors import ConfigError
from trnsim.hardware.specs import CoreSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Timeline:
    """Start and end (seconds) of every instruction of `trace` on `lanes[lane[i]]`.

    `lane_engines[k]` is the (engine, logical core) that lane k belongs to.
    `waited_on[i]` is the instruction whose end fixed i's start (-1 if none): following it back
    from the last instruction to finish gives the critical path.
    """

    trace: Trace
    core: CoreSpec
    target: str
    lanes: tuple[str, ...]
    lane_engines: tuple[tuple[Engine, int], ...]
    lane: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    waited_on: np.ndarray

    @property
    def latency_s(self) -> float:
        return float(self.end_s.max()) if len(self.end_s) else 0.0

    @property
    def duration_s(self) -> np.ndarray:
        return self.end_s - self.start_s

    def lane_rank(self) -> list[int]:
        """Display position of each lane: per core, Tensor, Vector, Scalar, GpSimd, DMA queues."""
        engines = list(Engine)
        order = sorted(range(len(self.lanes)), key=lambda k: (
            self.lane_engines[k][1], engines.index(self.lane_engines[k][0]), k))
        rank = [0] * len(order)
        for position, lane in enumerate(order):
            rank[lane] = position
        return rank

    def critical_path(self) -> list[int]:
        """Instruction indices on the longest dependency chain, first to last."""
        if not len(self.end_s):
            return []
        path = [int(np.argmax(self.end_s))]
        while self.waited_on[path[-1]] >= 0:
            path.append(int(self.waited_on[path[-1]]))
        return path[::-1]


def lane_name(engine: Engine, core: int, queue: int | None = None) -> str:
    """Track names: "tensor", "dma3"; with several logical cores "nc1.tensor"."""
    name = engine.value if queue is None else f"{engine.value}{queue}"
    return name if core == 0 else f"nc{core}.{name}"


def _signature(ins: Instruction) -> tuple:
    """What an instruction's cost depends on: no addresses, so repeated shapes share a key."""
    # Enum members hash in Python; their ids (stable singletons) hash in C.
    regions = tuple([(id(r.memory), r.partition_count, r.pattern, r.dtype, r.dtype_bytes)
                     for r in ins.outputs + ins.inputs])
    return id(ins.opcode), id(ins.engine), regions, tuple(ins.params.items())


def instruction_costs(trace: Trace, core: CoreSpec) -> list[float]:
    """Seconds of each instruction, computing each distinct shape once."""
    cache: dict[tuple, float] = {}
    seconds = []
    for ins in trace:
        key = _signature(ins)
        try:
            cost = cache.get(key)
        except TypeError:  # a parameter that is not hashable (a list): cost it every time
            key = cost = None
        if cost is None:
            cost = float(COST[ins.opcode](ins, core))
            if key is not None:
                cache[key] = cost
        seconds.append(cost)
    return seconds


class _Memory:
    """Last writer and readers of each byte range touched so far, per allocation.

    Per allocation a list of segments [p0, p1, b0, b1, write_end, writer, read_end, reader];
    a write drops the segments it covers, so repeated use of one tile keeps the list short.
    """

    def __init__(self):
        self.segments: dict[int, list[list]] = {}
        self.spans: dict[tuple, tuple[int, int, int, int]] = {}

    def wait(self, ins: Instruction) -> tuple[float, int, list[tuple]]:
        """When `ins`'s operands are ready, which instruction it waited on, and its accesses.

        An access is (allocation id, p0, p1, first byte, last byte, writing); allocation ids are
        unique across memories within a run.
        """
        accesses, spans = [], self.spans
        for regions, writing in ((ins.inputs, False), (ins.outputs, True)):
            for region in regions:
                span_key = (region.address_bytes, region.offset, region.pattern, region.dtype_bytes)
                span = spans.get(span_key)
                if span is None:
                    span = spans[span_key] = region.byte_span()
                p0 = region.partition_start
                accesses.append((region.buffer, p0, p0 + region.partition_count, span[0], span[1],
                                 writing))
        ready, blocker = 0.0, -1
        for key, p0, p1, b0, b1, writing in accesses:
            for seg in self.segments.get(key, ()):
                if seg[0] < p1 and p0 < seg[1] and seg[2] <= b1 and b0 <= seg[3]:
                    if seg[4] > ready:
                        ready, blocker = seg[4], seg[5]
                    if writing and seg[6] > ready:
                        ready, blocker = seg[6], seg[7]
        return ready, blocker, accesses

    def note(self, accesses: list[tuple], end_s: float, index: int) -> None:
        """Remember that instruction `index` (ending at `end_s`) made these accesses."""
        for key, p0, p1, b0, b1, writing in accesses:
            segments = self.segments.get(key)
            if segments is None:
                segments = self.segments[key] = []
            if writing:
                if segments:
                    segments[:] = [s for s in segments if not (
                        p0 <= s[0] and s[1] <= p1 and b0 <= s[2] and s[3] <= b1)]
                segments.append([p0, p1, b0, b1, end_s, index, 0.0, -1])
                continue
            for seg in segments:
                if seg[0] == p0 and seg[1] == p1 and seg[2] == b0 and seg[3] == b1:
                    if end_s > seg[6]:
                        seg[6], seg[7] = end_s, index
                    break
            else:
                segments.append([p0, p1, b0, b1, 0.0, -1, end_s, index])


class _Lanes:
    """Engine lanes and DMA queues: when each is next free and which instruction ran last."""

    def __init__(self, core: CoreSpec):
        self.queues = core.dma_queues
        self.index: dict[tuple, int] = {}
        self.names: list[str] = []
        self.engines: list[tuple[Engine, int]] = []
        self.free_s: list[float] = []
        self.last: list[int] = []
        self.dma_lanes: dict[int, list[int]] = {}

    def lane(self, engine: Engine, core: int, queue: int | None = None) -> int:
        key = (engine, core, queue)
        lane = self.index.get(key)
        if lane is None:
            lane = self.index[key] = len(self.names)
            self.names.append(lane_name(engine, core, queue))
            self.engines.append((engine, core))
            self.free_s.append(0.0)
            self.last.append(-1)
        return lane

    def dma(self, ins: Instruction, ready_s: float) -> int:
        """The kernel's queue if it named one; else the queue that frees first, unless the
        transfer waits for its data anyway: then the busiest queue that is free by then, so
        early-free queues stay open for transfers that are ready now (best fit)."""
        queue = ins.params.get("queue")
        if type(queue) is int:  # a named issuing engine ("sync", "gpsimd") picks no queue
            if not 0 <= queue < self.queues:
                raise ConfigError(f"{ins}: DMA queue {queue!r} does not exist",
                                  hint=f"this core has queues 0..{self.queues - 1}")
            return self.lane(Engine.DMA, ins.core, queue)
        lanes = self.dma_lanes.get(ins.core)
        if lanes is None:
            lanes = self.dma_lanes[ins.core] = [self.lane(Engine.DMA, ins.core, q)
                                                for q in range(self.queues)]
        free = self.free_s
        earliest = min(lanes, key=free.__getitem__)
        if ready_s <= free[earliest]:
            return earliest
        return max([lane for lane in lanes if free[lane] <= ready_s], key=free.__getitem__)


def schedule(trace: Trace, target: str | CoreSpec | None = None) -> Timeline:
    """Time `trace` on `target` (default: the target it was recorded for)."""
    target = trace.target if target is None else target
    core = core_spec(target)
    seconds = instruction_costs(trace, core)
    lane_of, start_s, end_s, waited_on = [], [], [], []
    memory, lanes = _Memory(), _Lanes(core)
    sync_s = {engine: core.costs.static_overhead_cycles / core.engines[engine.value].clock_hz
              for engine in Engine if engine.value in core.engines}
    dma, free, last = Engine.DMA, lanes.free_s, lanes.last
    for index, ins in enumerate(trace):
        ready, blocker, accesses = memory.wait(ins)
        engine = ins.engine
        lane = lanes.dma(ins, ready) if engine is dma else lanes.lane(engine, ins.core)
        start = free[lane]
        if blocker >= 0 and ready >= start:
            # Waiting on another instruction costs a semaphore, except inside a matmul
            # accumulation group, which the PE array and PSUM pipeline in place.
            pipelined = ins.opcode in MATMUL and trace[blocker].opcode in MATMUL
            start = ready if pipelined else ready + sync_s.get(engine, 0.0)
            waited_on.append(blocker)
        else:
            waited_on.append(last[lane])
        end = start + seconds[index]
        free[lane], last[lane] = end, index
        lane_of.append(lane)
        start_s.append(start)
        end_s.append(end)
        memory.note(accesses, end, index)
    name = target if isinstance(target, str) else core.name
    return Timeline(trace=trace, core=core, target=name, lanes=tuple(lanes.names),
                    lane_engines=tuple(lanes.engines),
                    lane=np.array(lane_of, np.int32), start_s=np.array(start_s),
                    end_s=np.array(end_s), waited_on=np.array(waited_on, np.int64))


def latency_s(trace: Trace, target: str | CoreSpec | None = None) -> float:
    """Seconds from the first instruction's start to the last one's end on `target`."""
    return schedule(trace, target).latency_s
