"""Deferred execution: a kernel's matmul GEMMs run on worker threads while the kernel issues on.

Why: an nc_matmul is a 128 x 128 x 512 GEMM, and most of a matmul kernel's time is these GEMMs.
Kernels run with one BLAS thread (nki/jit.py), so one GEMM uses one core; a blocked matmul issues,
for each output tile, a K loop of matmuls into its own PSUM tile, and those chains are independent.
Here every instruction is executed by the kernel's thread in issue order (its checks, PSUM flags,
fp32 shadows and errors are those of eager execution), except that a matmul's GEMM is only recorded
(`blas.queued`) and handed to a worker (a `_Lane`), which makes it while the kernel goes on issuing.
ctypes lets go of the GIL during sgemm, so the workers use the other cores; the kernel's thread is
the only one that runs Python.

Why the values are bitwise those of eager execution: each GEMM is the same one-thread sgemm
product, with the same operands, shapes and strides (a worker makes what waits for it in one
`blas.run_queued` call, which gives the bits of one call each), and the GEMMs writing one PSUM
tile run in issue order on one lane; only which thread makes them changes. (BLAS sums one K tile
in an order that depends on the GEMM's shape and thread count, so merging matmuls into larger
GEMMs, or giving one GEMM several threads, would change the last fp32 bits:
docs/emulator-speed.md.) So eager, deferred, strict and LNC=2 runs of a kernel give the same bits.

The rules that keep issue order's values:
* A GEMM writes one PSUM tile and reads two operands: the fp32 shadows of bf16/fp8 tiles (a write
  to the tile drops its shadow, so nothing later changes what the GEMM reads) or, for fp32 tiles,
  the tile itself. The queue remembers, per buffer, the last GEMM writing it and the last GEMM on
  each lane reading it in place.
* Another instruction runs when every GEMM it depends on is done: those writing a buffer it reads,
  and those reading or writing a buffer it writes. Until then it waits in `pending`, and so does
  every instruction issued after it (they run in issue order), except a DMA that copies bits
  unchanged and touches nothing pending (the next block's loads into fresh tiles). The kernel's
  thread runs what is ready each time it issues; it waits only when it must (a flush, a matmul
  that conflicts with what is pending, AHEAD).
* A matmul may run before pending instructions only if it reads no buffer they write and writes
  none they read or write (else they run first). It then changes nothing they look at: its GEMM
  writes PSUM, and its bookkeeping (flags, shadows) touches only its own operands.
* Matmuls that do not reduce to a GEMM adding into a 2-D fp32 PSUM region (transposes, other
  dtypes) run like any other instruction, after everything pending.
* Anything that looks at values outside execution runs the queue first (`flush`): reading a
  tile's values (`View.array` of a buffer the core made), the engine state (registers, RNG),
  instructions whose values the front end moves itself, a failing check, and the kernel's end.
* Pending instructions hold `Buffer.clone()`s, so a tile the kernel drops is freed exactly when it
  would be without the queue: allocation, addresses and the trace never depend on deferral.
* At most AHEAD GEMMs wait for a worker; beyond that the kernel's thread waits, so the tiles held
  by queued GEMMs stay bounded.

Strict mode and `config.override(eager=True)` execute every instruction when it is issued.
"""

from __future__ import annotations

import collections
import queue
import threading
import weakref
from dataclasses import dataclass

from trnsim.core import blas
from trnsim.core.execute import F32, accum_mask
from trnsim.core.execute import run as run_instruction
from trnsim.core.execute_data import settled_gemm
from trnsim.core.isa import Opcode
from trnsim.core.memory import View
from trnsim.core.trace import Instruction

AHEAD = 512
"""GEMMs that may wait for a worker before the kernel's thread waits for them: a bound on the memory
queued GEMMs keep alive (their PSUM tiles and operands); 128 and 2048 were no faster on the bench
kernel (docs/emulator-speed.md)."""

BATCH = 32
"""Most GEMMs a worker makes in one BLAS call (it takes what is waiting): few enough that an
instruction waiting for one of them does not wait long, enough that the worker seldom needs the
GIL (8 was clearly slower on the bench kernel, 128 no faster: docs/emulator-speed.md)."""


class _Lane:
    """A worker thread that makes the GEMMs it is handed, in order. After a failure it makes no more
    GEMMs but still counts them done, so nothing waits forever (the error is in `errors`)."""

    def __init__(self, errors: list):
        self.errors = errors
        self.gemms: queue.SimpleQueue = queue.SimpleQueue()
        self.posted = 0  # counted by the kernel's thread
        self.done = 0  # counted by the worker
        self.finished = threading.Condition(threading.Lock())
        self.thread = threading.Thread(target=self._main, name="trnsim-gemm", daemon=True)
        self.thread.start()

    def post(self, gemm: tuple, order: int) -> int:
        """Queue one GEMM; its ticket: the lane has made it once `done` reaches the ticket."""
        self.posted += 1
        self.gemms.put((gemm, order))
        return self.posted

    def wait(self, ticket: int) -> None:
        if self.done < ticket:
            with self.finished:
                self.finished.wait_for(lambda: self.done >= ticket)

    def stop(self) -> None:
        self.gemms.put(None)
        if self.thread is not threading.current_thread():  # a finaliser may run on the worker itself
            self.thread.join()

    def _main(self) -> None:
        while (item := self.gemms.get()) is not None:
            batch = [item]
            while len(batch) < BATCH and not self.gemms.empty():  # what waits goes in one BLAS call
                if (item := self.gemms.get()) is None:
                    self.gemms.put(None)
                    break
                batch.append(item)
            if not self.errors:
                try:
                    blas.run_queued([gemm for gemm, _order in batch])
                except BaseException:  # noqa: BLE001 - raised on the kernel's thread
                    self._find_failure(batch)
            with self.finished:
                self.done += len(batch)
                self.finished.notify_all()

    def _find_failure(self, batch: list) -> None:
        """Make a failed batch's GEMMs one at a time to learn which one failed: its issue order
        decides whether its error or an instruction's is raised. (A GEMM fails only by a trnsim
        bug; the values no longer matter once one has.)"""
        for gemm, order in batch:
            try:
                blas.run_queued([gemm])
            except BaseException as error:  # noqa: BLE001 - raised on the kernel's thread
                self.errors.append((order, error))
                return


Needs = tuple[tuple[_Lane, int], ...]
"""GEMMs an instruction waits for: (lane, ticket) pairs."""


@dataclass(slots=True)
class Pending:
    order: int  # issue order, to rank its error against a GEMM's
    ins: Instruction
    inputs: tuple[View, ...]
    outputs: tuple[View, ...]
    needs: Needs


class DeferredQueue:
    """One core's deferred work: GEMMs on lanes, and the instructions waiting for them."""

    def __init__(self, state):
        self.state = state
        self.lanes: list[_Lane] = []  # changed in place only: the finaliser below holds this list
        weakref.finalize(self, _stop_lanes, self.lanes)  # a queue dropped unflushed stops its workers
        self.errors: list[tuple[int, BaseException]] = []  # GEMM failures: (issue order, error)
        self.pending: collections.deque[Pending] = collections.deque()
        self.pending_writes: dict[int, int] = {}  # buffer id -> how many pending instructions write it
        self.pending_touches: dict[int, int] = {}  # ... read or write it
        self.gemm_writes: dict[int, tuple[_Lane, int]] = {}  # buffer id -> the last GEMM writing it
        self.gemm_reads: dict[int, dict[_Lane, int]] = {}  # buffer id -> per lane, the last reading it
        self.settled: dict[int, tuple] = {}  # PSUM buffer id -> region whose flags are all set
        self.issued = 0
        self.failed = 0  # issue order of the pending instruction that failed (0: none)
        self.here = False  # the kernel's thread is executing an instruction whose needs are met

    def __bool__(self) -> bool:
        """Whether a buffer's values may not be current yet (instructions or GEMMs not run)."""
        return not self.here and (bool(self.pending) or any(lane.done < lane.posted for lane in self.lanes))

    def add(self, ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> None:
        """Execute an instruction now, hand its GEMM to a worker, or let it wait for GEMMs."""
        self.issued += 1
        self._run_ready()
        if ins.opcode is Opcode.MATMUL:
            self._matmul(ins, inputs, outputs)
            return
        for view in inputs + outputs:
            self.settled.pop(view.storage.id, None)  # it clears or reads PSUM accumulation flags
        needs = self._needs(inputs, outputs)
        if _met(needs) and not self.pending:
            self._run_here(ins, inputs, outputs)
            return
        if _met(needs) and _moves_bits(ins, inputs, outputs) and not self._conflicts(inputs, outputs):
            try:  # a load into a fresh tile need not wait for the copies out of PSUM
                self._run_here(ins, inputs, outputs)
            except BaseException:
                self._run_pending()  # an instruction issued earlier fails first, as in issue order
                raise
            return
        _count(self.pending_writes, outputs, 1)
        _count(self.pending_touches, inputs + outputs, 1)
        self.pending.append(Pending(self.issued, ins, _detach(inputs), _detach(outputs), needs))

    def flush(self) -> None:
        """Run everything not run yet, here and now (raising the first execution error, in issue
        order: a GEMM's or an instruction's)."""
        try:
            self._run_pending()
            for lane in self.lanes:
                lane.wait(lane.posted)
        except BaseException:
            self._stop()
            self._raise_gemm_error()
            raise
        self._stop()
        self._raise_gemm_error()

    def _raise_gemm_error(self) -> None:
        """Raise the first GEMM failure, unless an instruction issued before it failed (then that
        GEMM would never have run)."""
        errors, self.errors = self.errors, []
        earlier = [error for order, error in errors if not self.failed or order < self.failed]
        if earlier:
            raise earlier[0]

    def _stop(self) -> None:
        """Stop the workers once they are done, and forget what the GEMMs touched."""
        _stop_lanes(self.lanes)
        self.gemm_writes, self.gemm_reads, self.settled = {}, {}, {}
        self.pending_writes.clear()
        self.pending_touches.clear()

    def _matmul(self, ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> None:
        out = outputs[0]
        if not _is_gemm(ins, out):
            self.settled.pop(out.storage.id, None)
            self._run_pending()
            self._wait(self._needs(inputs, outputs))
            self._run_here(ins, inputs, outputs)
            return
        if self._conflicts(inputs, outputs):
            self._run_pending()
        buffer = out.storage.id
        region = (out.offset, out.shape, out.strides)
        writer = self.gemm_writes.get(buffer)
        if self.settled.get(buffer) == region:  # a chain's later step: no flag scans
            self.here = True
            try:
                gemms = [settled_gemm(ins, inputs, outputs, self.state)]
            finally:
                self.here = False
        else:
            if writer is not None and _partly_accumulating(out):  # it will add to some of the sums
                writer[0].wait(writer[1])
            gemms = []
            with blas.queued(gemms):
                self._run_here(ins, inputs, outputs)
            self.settled[buffer] = region
        lane = writer[0] if writer is not None and writer[0].done < writer[1] else self._idlest_lane()
        for gemm in gemms:
            ticket = lane.post(gemm, self.issued)
            self.gemm_writes[buffer] = (lane, ticket)
            for view in inputs:
                if view.element.numpy == F32:  # read in place, not from a shadow
                    self.gemm_reads.setdefault(view.storage.id, {})[lane] = ticket
        self._hold_back()

    def _conflicts(self, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> bool:
        """Whether running now, before what is pending, could change what they read or write."""
        if not self.pending:
            return False
        writes, touches = self.pending_writes, self.pending_touches
        return (any(writes.get(view.storage.id) for view in inputs)
                or any(touches.get(view.storage.id) for view in outputs))

    def _run_here(self, ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> None:
        self.here = True
        try:
            run_instruction(ins, inputs, outputs, self.state, False)
        finally:
            self.here = False

    def _needs(self, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> Needs:
        needs = [self.gemm_writes[view.storage.id] for view in inputs + outputs
                 if view.storage.id in self.gemm_writes]
        for view in outputs:
            needs.extend(self.gemm_reads.get(view.storage.id, {}).items())
        return tuple(need for need in needs if need[0].done < need[1])

    def _wait(self, needs: Needs) -> None:
        for lane, ticket in needs:
            lane.wait(ticket)

    def _run_ready(self) -> None:
        """Run the pending instructions whose GEMMs are done, in issue order."""
        while self.pending and _met(self.pending[0].needs):
            self._run_first()

    def _run_pending(self) -> None:
        """Run every pending instruction, in issue order, waiting for the GEMMs each needs."""
        while self.pending:
            self._wait(self.pending[0].needs)
            self._run_first()

    def _run_first(self) -> None:
        entry = self.pending.popleft()
        _count(self.pending_writes, entry.outputs, -1)
        _count(self.pending_touches, entry.inputs + entry.outputs, -1)
        try:
            failed = [error for order, error in self.errors if order < entry.order]
            if failed:  # a GEMM issued before this instruction failed: its error comes first
                raise failed[0]
            run_instruction(entry.ins, entry.inputs, entry.outputs, self.state, False)
        except BaseException:
            self.failed = entry.order
            self.pending.clear()  # what the kernel issued after the failure never runs
            self.pending_writes.clear()
            self.pending_touches.clear()
            raise

    def _idlest_lane(self) -> _Lane:
        """The lane with the fewest GEMMs to make (lanes start on first use: as many as BLAS had
        threads when trnsim started, `blas.started_threads()`)."""
        if not self.lanes:
            self.lanes.extend(_Lane(self.errors) for _ in range(blas.started_threads()))
        return min(self.lanes, key=lambda lane: lane.posted - lane.done)

    def _hold_back(self) -> None:
        """Wait while more than AHEAD GEMMs wait for a worker."""
        waiting = sum(lane.posted - lane.done for lane in self.lanes)
        if waiting > AHEAD:
            busiest = max(self.lanes, key=lambda lane: lane.posted - lane.done)
            busiest.wait(busiest.done + waiting - AHEAD)


def _stop_lanes(lanes: list[_Lane]) -> None:
    for lane in lanes:
        lane.stop()
    lanes.clear()


def _count(counts: dict[int, int], views: tuple[View, ...], step: int) -> None:
    for view in views:
        counts[view.storage.id] = counts.get(view.storage.id, 0) + step


def _met(needs: Needs) -> bool:
    return all(lane.done >= ticket for lane, ticket in needs)


def _detach(views: tuple[View, ...]) -> tuple[View, ...]:
    return tuple(view.on(view.storage.clone()) for view in views)


def _moves_bits(ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> bool:
    """A DMA that copies stored bits unchanged (one dtype, no gather, scatter or reduction): it
    draws no random bits, so it may run before pending instructions it does not touch."""
    return (ins.opcode is Opcode.DMA_COPY and not ins.param("indirect") and not ins.param("reduce_op")
            and all(view.element == outputs[0].element for view in inputs))


def _is_gemm(ins: Instruction, out: View) -> bool:
    """A matmul that executes as one sgemm writing or adding into a 2-D fp32 region (its dst is
    PSUM, as the contract checks), drawing no random bits (every other matmul runs after what is
    pending, as issued)."""
    return (len(out.shape) == 2 and out.element.numpy == F32 and out.storage.dtype is out.element
            and not ins.param("is_transpose"))


def _partly_accumulating(out: View) -> bool:
    """Whether some but not all of the region belongs to an open accumulation group: then the
    matmul adds to those sums in numpy (`accumulate_matmul`), reading what earlier GEMMs wrote."""
    if out.storage.accum is None:
        return False
    flags = accum_mask(out)
    return bool(flags.any()) and not bool(flags.all())
