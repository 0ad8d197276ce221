"""Deferred execution: instructions wait in a queue so that independent matmul chains run in parallel.

Why: an nc_matmul is a 128 x 128 x 512 GEMM, and most of a matmul kernel's time is these GEMMs.
One BLAS thread per instruction (nki/jit.py runs kernels so) uses one core; the usual NKI blocked
matmul issues, for each output tile of a block, a K loop of matmuls into its own PSUM tile, and
those chains are independent of each other. Queued, they run side by side on worker threads
(ctypes lets go of the GIL during sgemm), one chain at a time per thread, each matmul the same
`execute.run` call that eager execution makes.

Why the values are bitwise those of eager execution: each matmul is computed by the same code
with the same operands, shapes and strides, on one BLAS thread, in the same order within its
PSUM tile; only which thread runs it changes. (BLAS sums one K tile in an order that depends on
the GEMM's shape, its thread count and where an element falls in the kernel's register blocks,
so one GEMM over a whole grid of tiles, as this module used to run, or a multi-threaded GEMM,
differs in the last fp32 bits: in 2% to 44% of the elements on the project machine's OpenBLAS,
docs/emulator-speed.md.) So eager, deferred, strict and LNC=2 runs of a kernel give the same bits.

The rules that make reordering safe:
* The queue holds one segment. It starts at a matmul; every later instruction joins it, except a
  matmul that reads a buffer a queued non-matmul writes, or writes a buffer a queued non-matmul
  reads or writes: the segment runs first. So running all of a segment's matmuls before its other
  instructions (which keep their order) gives the values that issue order gives. Matmuls read
  SBUF and write PSUM only, so the chains of different PSUM tiles never touch each other's data.
* Only chains that draw nothing and warn about nothing run on workers: fp32 results (a cast could
  draw stochastic-rounding bits, which must come in issue order) and no `accumulate=True` (onto
  never-written PSUM it warns). Of the errors on workers, the earliest instruction's is raised.
* Anything that looks at values outside execution runs the queue first (`flush`): reading a
  tile's values (`View.array` of a buffer the core made), the engine state (registers, RNG),
  instructions whose values the front end moves itself, a failing check, and the kernel's end.
* Queued operands point at `Buffer.clone()`s, so a tile the kernel drops is freed exactly when it
  would be without the queue: allocation, addresses and the trace never depend on deferral.
* A segment also ends, at the next chain boundary, once it holds SEGMENT_MATMULS matmuls: queued
  operands keep their tiles' values alive, and a bounded segment lets the array pool
  (core/pool.py) reuse that memory.

Strict mode and `config.override(eager=True)` execute every instruction when it is issued.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from trnsim.core import blas
from trnsim.core.execute import F32, f32_reused
from trnsim.core.execute import run as run_instruction
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

    def __bool__(self) -> bool:
        return bool(self.entries)

    def add(self, ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...]) -> None:
        """Queue an instruction, or run it now when it cannot pay off (no matmul queued yet)."""
        is_matmul = ins.opcode is Opcode.MATMUL
        if not self and not is_matmul:
            run_instruction(ins, inputs, outputs, self.state, False)
            return
        if is_matmul:
            conflict = (any(v.storage.id in self.written for v in inputs)
                        or any(v.storage.id in self.touched for v in outputs))
            full = self.matmuls >= SEGMENT_MATMULS and self.entries[-1].ins.opcode is not Opcode.MATMUL
            if conflict or full:
                self.flush()
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
        """Run the segment: its independent matmul chains on workers, then the rest in issue order."""
        entries = self.entries
        self.entries, self.clones, self.written, self.touched = [], {}, set(), set()
        self.matmuls = 0
        done = self._run_chains(entries)
        for entry in entries:
            if id(entry) not in done:
                run_instruction(entry.ins, entry.inputs, entry.outputs, self.state, False)

    def _run_chains(self, entries: list[Queued]) -> set[int]:
        """Run every chain that may run alone on worker threads; return the ids of its entries."""
        chains: dict[int, list[Queued]] = {}
        for entry in entries:
            if entry.ins.opcode is Opcode.MATMUL:
                chains.setdefault(entry.outputs[0].storage.id, []).append(entry)
        alone = [chain for chain in chains.values() if _runs_alone(chain)]
        if len(alone) < 2:
            return set()
        position = {id(entry): index for index, entry in enumerate(entries)}
        for chain in alone:
            for entry in chain:
                for view in entry.inputs:
                    f32_reused(view)  # each fp32 shadow is made here, before workers read it
        with ThreadPoolExecutor(min(len(alone), blas.started_threads())) as workers:
            runs = [workers.submit(contextvars.copy_context().run, self._run_chain, chain, position)
                    for chain in alone]
            failures = [failure for run in runs if (failure := run.result()) is not None]
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]
        return {id(entry) for chain in alone for entry in chain}

    def _run_chain(self, chain: list[Queued], position: dict[int, int]) -> tuple[int, Exception] | None:
        """Run one chain in order; on an error, stop and return (its position in the segment, error)."""
        for entry in chain:
            try:
                run_instruction(entry.ins, entry.inputs, entry.outputs, self.state, False)
            except Exception as error:  # raised by the caller, earliest instruction first
                return position[id(entry)], error
        return None


def _runs_alone(chain: list[Queued]) -> bool:
    """A chain whose matmuls draw nothing and warn about nothing: fp32 results, no accumulate=True."""
    return all(entry.outputs[0].element.numpy == F32 and entry.ins.param("accumulate") is not True
               for entry in chain)


