"""Engine queues plus memory dependencies -> a timeline: when each instruction ran, and where.

Each engine runs its own instructions in program order. An instruction starts when its engine
(or DMA queue) is free and every instruction it depends on has finished: read-after-write,
write-after-read and write-after-write on overlapping bytes of the same allocation, plus its
issue latency (a DMA's descriptor, an engine's SBUF/PSUM access), which the instruction ahead on
the same lane hides. A DMA goes to the queue the kernel named, else to the queue that frees first;
a compiler spill to the core's spill queue. An instruction that had to wait for data also pays
the static semaphore overhead of its engine. An old-API kernel's instruction that recomputes a
result its compiler keeps runs nothing (`timing.reuse`). Costs come from `timing.costs`, so the same trace can
be timed for any generation without re-running the kernel.

    >>> timeline = schedule(trace, "trn2")
    >>> timeline.latency_s
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim import hardware
from trnsim.core.isa import MATMUL, Engine, Opcode
from trnsim.core.runtime import current as current_runtime
from trnsim.core.trace import NEURONX_CC, Instruction, Trace
from trnsim.errors import ConfigError
from trnsim.hardware.specs import CoreSpec
from trnsim.timing.costs import (
    broadcast_seconds,
    core_spec,
    fits_psum_bank,
    instruction_seconds,
    issue_latency_s,
    psum_operand_seconds,
)
from trnsim.timing.hazards import HazardTracker
from trnsim.timing.reuse import ResultReuse


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

    def engine_names(self) -> list[str]:
        """The engine each instruction ran on (its lane's: a partition broadcast copy runs on
        the Tensor Engine)."""
        names = [engine.value for engine, _core in self.lane_engines]
        return [names[lane] for lane in self.lane.tolist()]

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


def lane_name(engine: Engine, core: int, queue: int | str | None = None) -> str:
    """Track names: "tensor", "dma3", "dma_spill"; with several logical cores "nc1.tensor"."""
    name = engine.value if queue is None else f"{engine.value}{queue}"
    return name if core == 0 else f"nc{core}.{name}"


class _Costs(dict):
    """Seconds per instruction: (opcode, engine, operand shapes) -> (params, issue latency, busy
    seconds) of the last instruction of that kind. Runs of one kind usually share parameters,
    and comparing two parameter maps is cheaper than hashing one; other parameters are costed
    once per distinct (kind, params) in `by_params`."""

    def __init__(self, core: CoreSpec):
        super().__init__()
        self.core = core
        self.by_params: dict[tuple, tuple[float, float]] = {}

    def lookup(self, ins: Instruction, kind: tuple) -> tuple:
        """(params, issue latency, busy seconds) of `ins`, made the latest of its kind."""
        key = (kind, tuple(ins.params.items()))
        try:
            cost = self.by_params.get(key)
        except TypeError:  # a parameter that is not hashable (a list): cost it every time
            return (None, *self.compute(ins))
        if cost is None:
            cost = self.by_params[key] = self.compute(ins)
        latest = self[kind] = (ins.params, *cost)
        return latest

    def compute(self, ins: Instruction) -> tuple[float, float]:
        """(issue latency, busy seconds) of `ins`."""
        return issue_latency_s(ins, self.core), float(instruction_seconds(ins, self.core))


class _Lanes:
    """Engine lanes and DMA queues: when each is next free and which instruction ran last."""

    def __init__(self, core: CoreSpec):
        self.queues = core.dma_queues
        self.index: dict[tuple, int] = {}
        self.names: list[str] = []
        self.engines: list[tuple[Engine, int]] = []
        self.free_s: list[float] = []
        self.last: list[int] = []
        self.dma_base: dict[int, int] = {}

    def lane(self, engine: Engine, core: int, queue: int | str | None = None) -> int:
        key = (engine, core, queue)
        lane = self.index.get(key)
        if lane is None:
            lane = self.index[key] = len(self.names)
            self.names.append(lane_name(engine, core, queue))
            self.engines.append((engine, core))
            self.free_s.append(0.0)
            self.last.append(-1)
        return lane

    def dma(self, ins: Instruction, core: int, ready_s: float) -> int:
        """The kernel's queue on `core` if it named one; else the queue that frees first, unless
        the transfer waits for its data anyway: then the busiest queue that is free by then, so
        early-free queues stay open for transfers that are ready now (best fit)."""
        base = self.dma_base.get(core)
        if base is None:  # a core's queues are made together: lanes base .. base + queues - 1
            base = self.dma_base[core] = len(self.names)
            for queue in range(self.queues):
                self.lane(Engine.DMA, core, queue)
        queue = ins.params.get("queue")
        if type(queue) is int:  # a named issuing engine ("sync", "gpsimd") picks no queue
            if not 0 <= queue < self.queues:
                raise ConfigError(f"{ins}: DMA queue {queue!r} does not exist",
                                  hint=f"this core has queues 0..{self.queues - 1}")
            return base + queue
        free = self.free_s[base:base + self.queues]
        earliest = min(free)
        if ready_s <= earliest:
            return base + free.index(earliest)
        fitting = max(filter(ready_s.__ge__, free))  # the latest free time <= ready_s
        return base + free.index(fitting)


def _is_partition_broadcast(ins: Instruction, accesses: list[tuple]) -> bool:
    """A copy that reads more partitions of an on-chip allocation than were written to it so far:
    a partition-broadcast view (`nl.broadcast_to` of a [1, F] tile), which the compiler runs on
    the Tensor Engine rather than as a VectorE copy. The hazard lists already hold the writes."""
    writes, _reads, box, _writing = accesses[0]
    return bool(writes) and box[3] > max(item[1][3] for item in writes)


def schedule(trace: Trace, target: str | CoreSpec | None = None, *,
             not_before: dict[int, float] | None = None) -> Timeline:
    """Time `trace` on `target` (default: the target it was recorded for). `not_before` holds
    instructions that wait for other ranks: index -> the earliest second they may start.

    The cores of an LNC=2 trace meet where the kernel makes them: a `core_barrier` starts once
    every core has reached it, a `sendrecv` once its sender's matching `sendrecv` has started (its
    data is ready). As for ranks (`system.timeline`), the trace is scheduled again with the later
    starts held until no start moves (each pass only delays, so it ends)."""
    hold = dict(not_before or {})
    meetings = core_meetings(trace) if trace.cores > 1 else []
    # The loop makes many small lists and tuples and no reference cycles; the cyclic collector
    # would rescan them again and again (it doubled the time on 100k-instruction traces).
    with current_runtime().gc_paused():
        while True:
            timeline = _schedule(trace, target, hold)
            moved = False
            for waiter, waited in meetings:
                start = max(float(timeline.start_s[index]) for index in waited)
                if timeline.start_s[waiter] < start:
                    hold[waiter], moved = start, True
            if not moved:
                return timeline


def core_meetings(trace: Trace) -> list[tuple[int, list[int]]]:
    """(instruction, the instructions on other cores it cannot start before): the k-th
    `core_barrier` of each core waits for the k-th of every core; the k-th `sendrecv` a core
    receives from a peer on a pipe waits for the k-th the peer sends to it on that pipe."""
    barriers: dict[int, list[int]] = {}
    sent: dict[tuple, list[int]] = {}  # (sender, receiver, pipe) -> its sendrecvs in order
    for index, ins in enumerate(trace):
        if ins.opcode is Opcode.CORE_BARRIER:
            barriers.setdefault(ins.core, []).append(index)
        elif ins.opcode is Opcode.SENDRECV:
            sent.setdefault((ins.core, ins.param("send_to_rank"), ins.param("pipe_id")), []).append(index)
    complete = zip(*barriers.values(), strict=False)  # a barrier one core never reaches meets nobody
    meetings = [(index, list(group)) for group in complete for index in group]
    received: dict[tuple, int] = {}
    for index, ins in enumerate(trace):
        if ins.opcode is Opcode.SENDRECV:
            key = (ins.param("recv_from_rank"), ins.core, ins.param("pipe_id"))
            step = received[key] = received.get(key, -1) + 1
            if step < len(sent.get(key, ())):
                meetings.append((index, [sent[key][step]]))
    return meetings


def _schedule(trace: Trace, target: str | CoreSpec | None, not_before: dict[int, float]) -> Timeline:
    target = trace.target if target is None else target
    core = core_spec(target)
    physical = trace.cores  # a grid's programs share them: program p runs on core p % physical
    if physical > 1 and not hardware.has_lnc2(core):
        raise ConfigError(f"the trace ran on a logical core of {physical} physical cores (LNC=2), "
                          f"which {core.name} does not have", hint="time it on trn2 or later")
    costs = _Costs(core)
    count = len(trace)
    lane_of, start_s, end_s, waited_on = [0] * count, [0.0] * count, [0.0] * count, [-1] * count
    hazards, lanes = HazardTracker(physical), _Lanes(core)
    sync_s = {engine: core.costs.static_overhead_cycles / core.engines[engine.value].clock_hz
              for engine in Engine if engine.value in core.engines}
    free, last = lanes.free_s, lanes.last
    engine_lanes: dict[tuple[Engine, int], int] = {}
    operands, record = hazards.operands, hazards.record
    # Enum members bound once: reading one from its class costs as much as a dict lookup.
    dma, tensor = Engine.DMA, Engine.TENSOR
    copy, tensor_tensor, barrier, collective = (Opcode.TENSOR_COPY, Opcode.TENSOR_TENSOR,
                                                Opcode.CORE_BARRIER, Opcode.COLLECTIVE)
    broadcasts: set[int] = set()  # allocations a TensorE partition broadcast left in PSUM
    fences: dict[int, tuple[float, int]] = {}  # core -> (end, index) of its latest core_barrier
    reuse = ResultReuse() if trace.compiler == NEURONX_CC else None
    for index, ins in enumerate(trace):
        opcode, engine, params = ins.opcode, ins.engine, ins.params
        on = ins.core % physical
        shapes, accesses, ready, blocker = operands(ins, on)
        kind = (opcode, engine, shapes)
        try:
            costed, latency, seconds = costs[kind]
            if costed != params:
                costed, latency, seconds = costs.lookup(ins, kind)
        except (KeyError, ValueError):  # a new kind, or parameters (arrays) that cannot compare
            costed, latency, seconds = costs.lookup(ins, kind)
        data_ready = ready
        ready += latency  # a DMA's descriptor and semaphore, an engine's access: data moves after them
        if opcode is copy and _is_partition_broadcast(ins, accesses):
            engine, seconds = tensor, broadcast_seconds(ins, core)
            if fits_psum_bank(ins.outputs[0], core):  # else it is too wide for a PSUM tile: SBUF
                broadcasts.add(ins.outputs[0].buffer)
        elif broadcasts:
            if opcode is tensor_tensor and any(r.buffer in broadcasts for r in ins.inputs):
                seconds = psum_operand_seconds(ins, core)
            broadcasts.difference_update(r.buffer for r in ins.outputs)
        if reuse is not None:
            earlier = reuse.earlier(index, ins, engine, shapes)
            if earlier is not None:  # the compiler keeps the earlier result: nothing runs
                end = max(end_s[earlier], data_ready)
                lane_of[index], start_s[index], end_s[index] = lane_of[earlier], end, end
                waited_on[index] = earlier if end_s[earlier] >= data_ready else blocker
                record(accesses, end, index)
                continue
        if engine is dma:  # a collective runs on the collective cores' stream, beside the queues
            if opcode is collective:
                lane = lanes.lane(dma, on, "_cc")
            elif params.get("spill"):
                # The compiler's spill queue, served by every DMA engine of the core (the
                # published mamba_v2 profile at seq 8192 reloads a spilled 4 MiB tile in about
                # 17 us, the core's whole rate: aws-neuron-sdk nki/img/mamba_v2_8K_seqlen_zoomed.png,
                # nki/guides/tutorials/fused_mamba.rst); its share of the engines' bandwidth is
                # not taken from the others.
                lane, seconds = lanes.lane(dma, on, "_spill"), seconds / lanes.queues
            else:
                lane = lanes.dma(ins, on, ready)
        else:
            lane = engine_lanes.get((engine, on))
            if lane is None:
                lane = engine_lanes[(engine, on)] = lanes.lane(engine, on)
        start = free[lane]
        if ready >= start and (blocker >= 0 or latency):
            # Waiting on another instruction costs a semaphore (a DMA's is in its latency),
            # except inside a matmul accumulation group, which the PE array pipelines in place
            # (its operands' access overlaps the matmul ahead).
            if engine is dma or blocker < 0:
                start = ready
            elif opcode in MATMUL and trace[blocker].opcode in MATMUL:
                start = max(start, data_ready)
            else:
                start = ready + sync_s.get(engine, 0.0)
            waited_on[index] = blocker
        else:
            waited_on[index] = last[lane]
        if opcode is barrier:  # a fence: it waits for its core's work, and later work for it
            start = max(start, *(free[k] for k, (_engine, at) in enumerate(lanes.engines) if at == on))
        elif fences and on in fences and fences[on][0] > start:
            (start, waited_on[index]) = fences[on]
        if not_before and not_before.get(index, 0.0) > start:  # the other ranks come later
            start = not_before[index]
        end = start + seconds
        if opcode is barrier:
            fences[on] = (end, index)
        free[lane], last[lane] = end, index
        lane_of[index], start_s[index], end_s[index] = lane, start, end
        record(accesses, end, index)
    name = target if isinstance(target, str) else core.name
    return Timeline(trace=trace, core=core, target=name, lanes=tuple(lanes.names),
                    lane_engines=tuple(lanes.engines),
                    lane=np.array(lane_of, np.int32), start_s=np.array(start_s),
                    end_s=np.array(end_s), waited_on=np.array(waited_on, np.int64))


def latency_s(trace: Trace, target: str | CoreSpec | None = None) -> float:
    """Seconds from the kernel's start (time 0: the first instruction's issue latency counts) to
    the last instruction's end on `target`."""
    return schedule(trace, target).latency_s
