"""Deferred execution: instructions wait in a queue so that grids of matmuls run as one GEMM each.

Why: an nc_matmul is a 128 x 128 x 512 GEMM, and BLAS runs such small GEMMs at about 1.3x the cost
of one large one (reference baselines.md, figure 2); on matmul kernels that gap is most of the
emulator's time. The usual NKI blocked matmul issues, for each output tile of a block, a K loop of
matmuls into its own PSUM tile and then a copy out. Across the tiles of the block, the k-th
matmul of every tile reads column blocks of the same two SBUF panels, so one sgemm per k over the
whole block (accumulating with beta = 1) gives every PSUM element the same fp32 additions, one per
K tile in issue order, as running the instructions one by one. Only the rounding inside one K tile
can differ, as it does between BLAS builds (the hardware's PE order is not modelled either).

The rules that make reordering safe:
* The queue holds one segment. It starts at a matmul; every later instruction joins it, except a
  matmul that reads a buffer a queued non-matmul writes, or writes a buffer a queued non-matmul
  reads or writes: the segment runs first. So running all of a segment's matmuls before its other
  instructions (which keep their order) gives the values that issue order gives.
* Anything that looks at values outside execution runs the queue first (`flush`): reading a
  tile's values (`View.array` of a buffer the core made), the engine state (registers, RNG),
  instructions whose values the front end moves itself, a failing check, and the kernel's end.
* Queued operands point at `Buffer.clone()`s, so a tile the kernel drops is freed exactly when it
  would be without the queue: allocation, addresses and the trace never depend on deferral.
* A segment also ends, at the next chain boundary, once it holds SEGMENT_MATMULS matmuls: queued
  operands keep their tiles' values alive, and a bounded segment lets the array pool
  (core/pool.py) reuse that memory.

Matmuls that do not form such a grid run one by one, as before. Strict mode and
`config.override(eager=True)` execute every instruction when it is issued.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.core import blas
from trnsim.core.execute import F32, accum_mask, f32_reused, settle
from trnsim.core.execute import run as run_instruction
from trnsim.core.isa import Memory, Opcode
from trnsim.core.memory import GatherView, View
from trnsim.core.runtime import current as current_runtime
from trnsim.core.trace import Instruction

SEGMENT_MATMULS = 512
"""A segment holding this many matmuls runs at the next chain boundary (a matmul after a
non-matmul). 512 matmuls of 128 x 128 x 512 are ~8 GFLOP: GEMMs stay large, memory stays bounded
(measured on the 2-core project machine with bench/emulator.py's kernel, interleaved in one
process: ratio 1.60-1.65 at 512 against 1.72 at 256; 1024 was no better)."""


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
        """Run the segment: its matmul grids as GEMMs, the other matmuls, then everything else."""
        entries = self.entries
        self.entries, self.clones, self.written, self.touched = [], {}, set(), set()
        self.matmuls = 0
        matmuls = [e for e in entries if e.ins.opcode is Opcode.MATMUL]
        done = run_grids(matmuls) if len(matmuls) > 1 else set()
        for entry in entries:
            if id(entry) not in done:
                run_instruction(entry.ins, entry.inputs, entry.outputs, self.state, False)


def run_grids(matmuls: list[Queued]) -> set[int]:
    """Run every grid of matmul chains as one GEMM per round; return the ids of the entries run."""
    chains: dict[int, list[Queued]] = {}
    for entry in matmuls:
        chains.setdefault(entry.outputs[0].storage.id, []).append(entry)
    done: set[int] = set()
    for grid, rows, columns in _grids([chain for chain in chains.values() if _fusable(chain)]):
        _run_grid(grid, rows, columns)
        done.update(id(entry) for chain in grid.values() for entry in chain)
    return done


def _key(view: View) -> tuple:
    return view.storage.id, view.offset, view.shape, view.strides


def _fusable(chain: list[Queued]) -> bool:
    """A chain the grid path reproduces exactly: one fp32 2-D PSUM region, written fresh by its
    first matmul and added to by the rest, plain 2-D operands, no transpose or double-row mode."""
    out = chain[0].outputs[0]
    if (out.memory is not Memory.PSUM or out.element.numpy != F32 or len(out.shape) != 2
            or out.storage.accum is None):
        return False
    for step, entry in enumerate(chain):
        ins = entry.ins
        mode = ins.param("accumulate")
        if mode not in ((None, False) if step == 0 else (None, True)):
            return False
        if ins.param("is_transpose") or ins.param("perf_mode") not in (None, "none"):
            return False
        if _key(entry.outputs[0]) != _key(out):
            return False
        if any(isinstance(v, GatherView) or len(v.shape) != 2 for v in entry.inputs):
            return False
    return not accum_mask(out).any()  # a region still accumulating from before would be added to


def _grids(chains: list[list[Queued]]):
    """Yield ({(row, column): chain}, row operands, column operands) for each grid: chains of equal
    length whose k-th stationaries sit side by side in one buffer, likewise their k-th movings,
    one chain for every (stationary, moving) pair."""
    by_length: dict[int, list[list[Queued]]] = {}
    for chain in chains:
        by_length.setdefault(len(chain), []).append(chain)
    for group in by_length.values():
        if len(group) < 2:
            continue
        rows = _panel_order([[e.inputs[0] for e in chain] for chain in group])
        columns = _panel_order([[e.inputs[1] for e in chain] for chain in group])
        if rows is None or columns is None:
            continue
        grid = {(rows[0][i], columns[0][i]): chain for i, chain in enumerate(group)}
        if len(grid) != len(group) or len(grid) != len(rows[1]) * len(columns[1]):
            continue
        yield grid, rows[1], columns[1]


def _panel_order(operands: list[list[View]]):
    """Each chain's index among the distinct operand sequences, and those sequences ordered so
    that in every round they sit side by side (column blocks of one [K, sum] window), or None."""
    distinct: dict[tuple, int] = {}
    index = [distinct.setdefault(tuple(_key(v) for v in seq), len(distinct)) for seq in operands]
    sequences = [None] * len(distinct)
    for seq, i in zip(operands, index, strict=True):
        sequences[i] = seq
    order = sorted(range(len(sequences)), key=lambda i: sequences[i][0].offset)
    rank = {old: new for new, old in enumerate(order)}
    ordered = [sequences[i] for i in order]
    for step in range(len(ordered[0])):
        first = ordered[0][step]
        offset = first.offset
        for seq in ordered:
            view = seq[step]
            if (view.storage.id != first.storage.id or view.strides != first.strides or view.strides[1] != 1
                    or view.shape[0] != first.shape[0] or view.shape[1] != seq[0].shape[1]
                    or view.offset != offset):
                return None
            offset += view.shape[1]
    return [rank[i] for i in index], ordered


def _panel(views: list[View]) -> np.ndarray:
    """The [K, sum of widths] fp32 window the side-by-side views make up."""
    first = views[0]
    width = sum(v.shape[1] for v in views)
    panel = View(first.storage, (first.shape[0], width), first.strides, first.offset, first.element)
    return f32_reused(panel)


def _run_grid(grid: dict, rows: list[list[View]], columns: list[list[View]]) -> None:
    """One GEMM per K step into the grid's fp32 sums, then each chain's PSUM tile gets its part."""
    row_starts = np.cumsum([0] + [seq[0].shape[1] for seq in rows])
    column_starts = np.cumsum([0] + [seq[0].shape[1] for seq in columns])
    shape = int(row_starts[-1]), int(column_starts[-1])
    total = current_runtime().pool.empty(shape[0] * shape[1], F32).reshape(shape)
    with blas.as_started():
        for step in range(len(rows[0])):
            stationary = _panel([seq[step] for seq in rows])
            moving = _panel([seq[step] for seq in columns])
            blas.gemm(stationary, moving, total, add=step > 0)
    for (row, column), chain in grid.items():
        out = chain[0].outputs[0]
        rows_of, columns_of = slice(*row_starts[row:row + 2]), slice(*column_starts[column:column + 2])
        out.assign(total[rows_of, columns_of])
        settle(out)
