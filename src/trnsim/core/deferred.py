"""Deferred execution: instructions wait in a queue so that independent matmul chains run in parallel.

Why: an nc_matmul is a 128 x 128 x 512 GEMM, and most of a matmul kernel's time is these GEMMs.
One BLAS thread per instruction (nki/jit.py runs kernels so) uses one core; the usual NKI blocked
matmul issues, for each output tile of a block, a K loop of matmuls into its own PSUM tile, and
those chains are independent of each other. When the queue runs, each matmul of such a chain
goes through the same `execute.run` call as in eager execution, on the kernel's thread and in
issue order (PSUM flags, shadows, errors), except that its sgemm is only recorded
(`blas.queued`); a chain's recorded GEMMs then run in order on a worker thread (ctypes lets go
of the GIL during sgemm), the chains side by side.

Why the values are bitwise those of eager execution: each matmul is the same sgemm call, with
the same operands, shapes and strides, on one BLAS thread, in the same order within its PSUM
tile; only which thread makes the call changes. (BLAS sums one K tile in an order that depends on
the GEMM's shape, its thread count and where an element falls in the kernel's register blocks,
so one GEMM over a whole grid of tiles, as this module used to run, or a multi-threaded GEMM,
differs in the last fp32 bits: in 2% to 44% of the elements on the project machine's OpenBLAS,
docs/emulator-speed.md.) So eager, deferred, strict and LNC=2 runs of a kernel give the same bits.

The rules that make reordering safe:
* The queue holds one segment. It starts at a matmul; every later instruction joins it, except a
  matmul that reads a buffer a queued non-matmul writes, or writes a buffer a queued non-matmul
  reads or writes: the segment runs first. So running a segment's matmuls before its other
  instructions (which keep their order) gives the values that issue order gives. Matmuls read
  SBUF and write PSUM only, so the chains of different PSUM tiles never touch each other's data,
  and another instruction needs only the chains whose PSUM it reads, or whose operands or PSUM it
  writes, to be done (it runs while later chains still multiply).
* Only chains whose GEMMs may wait run on workers: one 2-D fp32 PSUM region, so after its first
  matmul every step is a plain sgemm adding into it and nothing reads values a recorded GEMM has
  not made yet (see `_runs_alone`).
* Anything that looks at values outside execution runs the queue first (`flush`): reading a
  tile's values (`View.array` of a buffer the core made), the engine state (registers, RNG),
  instructions whose values the front end moves itself, a failing check, and the kernel's end.
* Queued operands point at `Buffer.clone()`s, so a tile the kernel drops is freed exactly when it
  would be without the queue: allocation, addresses and the trace never depend on deferral.
* A segment also ends, at the next chain boundary, once it holds SEGMENT_MATMULS matmuls: queued
  operands keep their tiles' values alive, and a bounded segment lets the array pool
  (core/pool.py) reuse that memory.
* A segment ended by a conflict or its size is handed off: it runs on its own thread while the
  kernel issues the next one (checks, trace and queueing are Python; the GEMMs are not), so the
  workers are not idle while the kernel's loop runs. Segments still run one at a time, in issue
  order: a hand-off or flush waits for the running one first, and raises its error.

Strict mode and `config.override(eager=True)` execute every instruction when it is issued.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from trnsim.core import blas
from trnsim.core.execute import F32
from trnsim.core.execute import run as run_instruction
from trnsim.core.execute_data import settled_gemm
from trnsim.core.isa import Opcode
from trnsim.core.memory import View
from trnsim.core.trace import Instruction

SEGMENT_MATMULS = 512
"""A segment holding this many matmuls runs at the next chain boundary (a matmul after a
non-matmul). 512 matmuls of 128 x 128 x 512 are ~8 GFLOP: enough chains to keep every worker
busy, memory stays bounded (measured with one GEMM per grid, on the 2-core project machine with
bench/emulator.py's kernel: ratio 1.60-1.65 at 512 against 1.72 at 256; 1024 was no better)."""


@dataclass(slots=True)
class Queued:
    ins: Instruction
    inputs: tuple[View, ...]
    outputs: tuple[View, ...]


class DeferredQueue:
    """One core's queued instructions (one segment) and the buffers its non-matmuls touch."""

    def __init__(self, state):
        self.state = state
        self.entries: list[Queued] = []
        self.clones: dict[int, object] = {}  # buffer id -> the clone queued operands use
        self.written: set[int] = set()  # buffers queued non-matmuls write
        self.touched: set[int] = set()  # ... or read
        self.matmuls = 0  # queued matmuls
        self.running: Segment | None = None  # the previous segment, running on its own thread

    def __bool__(self) -> bool:
        """Whether any instruction has not run yet (queued, or in the segment still running)."""
        return bool(self.entries) or self.running is not None

    def add(self, ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> None:
        """Queue an instruction, or run it now when it cannot pay off (no matmul queued yet)."""
        is_matmul = ins.opcode is Opcode.MATMUL
        if not self.entries and not is_matmul:
            self.wait()
            run_instruction(ins, inputs, outputs, self.state, False)
            return
        if is_matmul:
            conflict = (any(v.storage.id in self.written for v in inputs)
                        or any(v.storage.id in self.touched for v in outputs))
            full = self.matmuls >= SEGMENT_MATMULS and self.entries[-1].ins.opcode is not Opcode.MATMUL
            if conflict or full:
                self.hand_off()
            self.matmuls += 1
        else:
            for view in outputs:
                self.written.add(view.storage.id)
                self.touched.add(view.storage.id)
            for view in inputs:
                self.touched.add(view.storage.id)
        self.entries.append(Queued(ins, self._detach(inputs), self._detach(outputs)))

    def _detach(self, views: tuple[View, ...]) -> tuple[View, ...]:
        clones = self.clones
        detached = []
        for view in views:
            clone = clones.get(view.storage.id)
            if clone is None:
                clone = clones[view.storage.id] = view.storage.clone()
            detached.append(view.on(clone))
        return tuple(detached)

    def flush(self) -> None:
        """Run every instruction not run yet, here and now (raising the first execution error)."""
        self.wait()
        if self.entries:
            self._run(self._take())

    def hand_off(self) -> None:
        """Start the queued segment on its own thread and open a new one, so the kernel issues the
        next segment (its checks and trace, in Python) while this one's GEMMs run. Segments still
        run one after another, in issue order: the next starts only once this one is done."""
        self.wait()
        self.running = Segment(self._take(), self._run)

    def wait(self) -> None:
        """Wait for the running segment; its execution error, if any, is raised here."""
        running, self.running = self.running, None
        if running is None:
            return
        try:
            running.join()
        except BaseException:
            self._take()  # what the kernel issued after the failure never runs, as in issue order
            raise

    def _take(self) -> list[Queued]:
        entries = self.entries
        self.entries, self.clones, self.written, self.touched = [], {}, set(), set()
        self.matmuls = 0
        return entries

    def _run(self, entries: list[Queued]) -> None:
        """Run a segment: its independent matmul chains (GEMMs on workers), and the rest in issue
        order, each of those once the chains it depends on are done (`_Chains.wait_for`: so the
        copies out of PSUM run while later chains still multiply)."""
        chains = _Chains.start(entries, self.state)
        try:
            for entry in entries:
                if chains is not None:
                    if chains.owns(entry):
                        continue
                    chains.wait_for(entry)
                run_instruction(entry.ins, entry.inputs, entry.outputs, self.state, False)
        except BaseException:  # the kernel's error, not a worker's (a GEMM fails only by a trnsim bug)
            if chains is not None:
                chains.workers.shutdown()
            raise
        if chains is not None:
            chains.finish()


class _Chains:
    """A segment's matmul chains that may run alone, their GEMMs running on worker threads.

    Each matmul's bookkeeping runs here, in issue order, its GEMM recorded (`blas.queued`) and
    handed at once to the worker that owns its chain (chains are dealt round-robin to the workers,
    each of which makes its GEMMs in the order it gets them, so a chain's GEMMs keep issue order).
    After a chain's last GEMM its worker is handed the chain's `done` event."""

    def __init__(self, alone: list[list[Queued]], entries: list[Queued], state):
        lanes = [queue.SimpleQueue() for _ in range(min(len(alone), blas.started_threads()))]
        self.lane_of = {id(entry): lanes[number % len(lanes)]
                        for number, chain in enumerate(alone) for entry in chain}
        done = [threading.Event() for _ in alone]
        ending = {id(chain[-1]): event for chain, event in zip(alone, done, strict=True)}
        # What an instruction must wait for: a read, the chain writing that PSUM tile; a write, also
        # every chain reading the buffer (an fp32 operand's GEMM reads the tile itself, not a copy).
        self.before_read: dict[int, list[threading.Event]] = {}
        self.before_write: dict[int, list[threading.Event]] = {}
        for chain, event in zip(alone, done, strict=True):
            self.before_read[chain[0].outputs[0].storage.id] = [event]
            for storage in {view.storage.id for entry in chain for view in entry.inputs + entry.outputs}:
                self.before_write.setdefault(storage, []).append(event)
        firsts = {id(chain[0]) for chain in alone}
        self.errors: list[BaseException] = []
        self.workers = ThreadPoolExecutor(len(lanes))
        for lane in lanes:
            self.workers.submit(_make_gemms, lane, self.errors)  # it records its errors in `errors`
        try:
            for entry in entries:
                lane = self.lane_of.get(id(entry))
                if lane is None:
                    continue
                if id(entry) not in firsts:  # its region is settled by the chain's first matmul
                    lane.put(settled_gemm(entry.ins, entry.inputs, entry.outputs, state))
                else:
                    gemms: list = []
                    with blas.queued(gemms):
                        run_instruction(entry.ins, entry.inputs, entry.outputs, state, False)
                    for gemm in gemms:
                        lane.put(gemm)
                if id(entry) in ending:
                    lane.put(ending[id(entry)])
        except BaseException:  # a matmul's bookkeeping failed: the workers end at the None below
            self.workers.shutdown(wait=False)
            raise
        finally:
            for lane in lanes:
                lane.put(None)

    @classmethod
    def start(cls, entries: list[Queued], state) -> _Chains | None:
        """Start the segment's chains that may run alone; None when fewer than two do."""
        chains: dict[int, list[Queued]] = {}
        for entry in entries:
            if entry.ins.opcode is Opcode.MATMUL:
                chains.setdefault(entry.outputs[0].storage.id, []).append(entry)
        alone = [chain for chain in chains.values() if _runs_alone(chain)]
        return cls(alone, entries, state) if len(alone) >= 2 else None

    def owns(self, entry: Queued) -> bool:
        return id(entry) in self.lane_of

    def wait_for(self, entry: Queued) -> None:
        """Wait until every chain `entry` depends on is done: those writing the PSUM tiles it reads,
        and those reading or writing the buffers it writes."""
        for waits, views in ((self.before_read, entry.inputs), (self.before_write, entry.outputs)):
            for view in views:
                for done in waits.get(view.storage.id, ()):
                    done.wait()
                    if self.errors:
                        raise self.errors[0]

    def finish(self) -> None:
        """Wait for the workers; raise the first GEMM's error."""
        self.workers.shutdown()
        if self.errors:
            raise self.errors[0]


class Segment:
    """A segment running on its own thread, in a copy of the kernel's context (config, runtime).

    Context variables the segment sets (the stochastic-rounding stream, created on first use) are
    set in the kernel's context when it is joined, as executing there would have."""

    def __init__(self, entries: list[Queued], run):
        self.error: BaseException | None = None
        self.context = contextvars.copy_context()
        self.before = dict(self.context.items())
        self.thread = threading.Thread(target=self._main, args=(run, entries), name="trnsim-segment",
                                       daemon=True)
        self.thread.start()

    def _main(self, run, entries: list[Queued]) -> None:
        try:
            self.context.run(run, entries)
        except BaseException as error:  # noqa: BLE001 - raised on the kernel's thread by join()
            self.error = error

    def join(self) -> None:
        self.thread.join()
        for variable, value in self.context.items():
            if self.before.get(variable, _UNSET) is not value:
                variable.set(value)
        if self.error is not None:
            raise self.error


_UNSET = object()


def _make_gemms(lane: queue.SimpleQueue, errors: list) -> None:
    """A worker: make the recorded GEMMs it is handed, in order, and set the chain events it is
    handed, until it is handed None. After a failure it makes no more GEMMs but still sets the
    events, so that nothing waits forever (the waiter finds the error in `errors`)."""
    while (item := lane.get()) is not None:
        if isinstance(item, threading.Event):
            item.set()
        elif not errors:
            try:
                blas.run_queued([item])
            except BaseException as error:  # noqa: BLE001 - raised on the segment's thread
                errors.append(error)


def _runs_alone(chain: list[Queued]) -> bool:
    """A chain whose matmuls after the first are all plain GEMMs adding into one 2-D fp32 PSUM
    region (so no later step reads values a queued GEMM has not made yet), which draw nothing and
    warn about nothing: no cast to draw stochastic-rounding bits, no `accumulate=True` on the first
    (onto never-written PSUM it warns; on a later one it adds onto the region the first wrote, as
    continuing the group does), no transpose mode."""
    out = chain[0].outputs[0]
    key = (out.offset, out.shape, out.strides)
    return len(out.shape) == 2 and out.element.numpy == F32 and chain[0].ins.param("accumulate") is not True \
        and all((e.outputs[0].offset, e.outputs[0].shape, e.outputs[0].strides) == key
                and e.outputs[0].element is out.element and not e.ins.param("is_transpose") for e in chain)
