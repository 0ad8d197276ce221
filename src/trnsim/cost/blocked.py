"""Time a built-in kernel whose work is a grid of tiles: exactly (trace it, schedule it) or fast
(trace a clipped grid of the same tiles, then add the work the clipped grid left out).

A `Blocked` op names a kernel in `trnsim.cost.kernels`, the tile size along each dimension it
loops over, and how to build the kernel's arguments from the dimension sizes. The fast tier rests
on two facts of the scheduler: the busy time of each engine is a sum over tiles, so it is exactly
multilinear in the number of full tiles per dimension (read off traces with 1 and 2 tiles), and
once the grid is a few tiles wide the pipeline is in its steady state. When a kernel's tiles are
independent (a matmul's output tiles, an elementwise pass) and one core runs them, its busiest
engine then seldom waits, and the full grid's latency is that engine's busy time plus the fill
and drain of one clipped grid. Otherwise a second, smaller grid gives how much latency each busy
second of the bounding engine adds (`fast`): when each tile's work waits on its own earlier
results (a row's reduce before its rescale, attention's softmax between its two matmuls), and on
a logical core of two (LNC=2), whose kernels split their outermost loop between the cores. There
the core with the odd tile decides the latency, so every formula takes that core's busy time
(`_busiest_core`), not the average over both.

A kernel that names its outermost loop (`Blocked.outer`: a matmul's output column tiles) is
measured along it when two grids of whole iterations of that loop fit OUTER_CLIP_TILES (at LNC=2,
LNC2_OUTER_CLIP_TILES): as many iterations as fit and about half as many, every other axis in
full. An iteration of a short contraction loads its few tiles, multiplies and stores, and its
busiest engine (DMA) waits a fixed share of every iteration for the stores' data, so its latency
grows by a fixed time per iteration, not by its busy time; the fill and drain of a grid clipped
along every axis missed that by up to 21% (docs/timing.md).

When that outer loop has only a few iterations and the one grid would cut an axis other than the
loop inside it, a kernel that names that loop (`Blocked.rows`: a matmul's output row tiles) is
measured along it instead, on one core or two: ROW_GRID and ROW_GRID_SMALL whole rows, the other
axes in full (or the full grid, when it is no larger than those two). Each column tile of a
matmul starts by loading its moving block, K tiles of it, while TensorE waits, so the fill grows
with the contraction; a grid that cuts the contraction misses it (fp8 (1792, 7828, 512) came out
10% short).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trnsim.core.isa import Engine
from trnsim.core.runtime import current as current_runtime
from trnsim.nki import trace
from trnsim.timing import schedule
from trnsim.timing.costs import core_spec

CLIP_TILES = 128
"""Tiles in the one grid the fast tier traces for a kernel of independent tiles on one core (axes
that may not be clipped count in full): enough for the pipeline to reach its steady state. It
was 256 while short contractions took this rule (at 128, fp8 (8192, 256, 4096) came out 9%
short); since they follow their column tiles (`_outer_grids`), 128 and 256 agree with the exact
tier alike on 180 random matmuls (docs/timing.md), and 128 halves the largest trace."""
SLOPE_CLIP_TILES = 512
"""The same when the fast tier measures a slope (chained kernels, LNC=2, a kernel's outer loop):
it needs a longer run."""
OUTER_CLIP_TILES = 1024
"""The most tiles in the larger of the two grids of whole outer-loop iterations (`_outer_grids`):
at 512, fp8 matmuls whose column tiles were 171-256 tiles each (two fit, then one) came out up to
10% over the exact tier; at 1024, 48 shapes of that band were within 3% (docs/timing.md)."""
LNC2_OUTER_CLIP_TILES = 4096
"""The same on a logical core of two, when OUTER_CLIP_TILES does not hold two grids (each core
runs half of a grid's iterations). Such matmuls were otherwise measured on a grid clipped along
every axis, and its slope missed by up to 10% (bf16 (6827, 529, 8151): +10.0%); at one core the
clipped grid's fill and drain, with no slope, stays within 5% (docs/timing.md)."""
ROW_GRID = 8
"""Rows in the larger of the two grids of whole rows (`_row_grids`)."""
ROW_GRID_SMALL = 6
"""Rows in the smaller one. From 4 rows the slope still held some of the first rows' fill: fp8
misses stayed with 4 and 2, and bf16 on trn3 came out up to 14% over with 8 and 4
(docs/timing.md)."""
FEW_OUTER = 4
"""The most outer-loop iterations (a matmul's column tiles) for which rows are measured instead."""
ROW_CLIP_TILES = 2048
"""The most tiles in the larger grid of whole rows: with the contraction and four column tiles
of an 8192-wide matmul, the two grids take about half a second to trace; beyond it the one
grid is used."""
STREAM_CLIP_TILES = 64
"""The same for one-axis grids (elementwise passes, copies), whose steady state comes sooner, plus
the full grid's remainder of tiles over one per DMA queue of every core: the clipped grid then
ends on the same partly filled wave of transfers as the full one (clipped to 64 flat, a one-input
pass of 65 tiles came out 17% short, 30% at LNC=2)."""


@dataclass(frozen=True)
class Blocked:
    """A built-in kernel over a tile grid: `args(dims)` -> the kernel's arguments. The fast tier
    clips the grid along `clip_axes` only (default all): an axis whose tiles do different work
    (causal attention's key blocks) is traced in full."""

    kernel: str
    tiles: tuple[int, ...]
    args: Callable[[tuple[int, ...]], tuple]
    clip_axes: tuple[int, ...] | None = None
    chained: bool = False
    """Each tile's later instructions wait on its earlier results, so the busiest engine waits
    even in the steady state: the fast tier measures a slope (see the module docstring). Its
    dimensions are in loop order, outermost first."""
    outer: int | None = None
    """The axis of the kernel's outermost loop, whose iterations do the same work over the other
    axes (but the last, which may be a partial tile): the fast tier measures a slope along it
    when two grids of whole iterations fit (`_outer_grids`)."""
    rows: int | None = None
    """The axis of the loop just inside the outer one, each of whose iterations runs the remaining
    inner axes in full: the fast tier measures a slope along it when the outer loop has few
    iterations (`_row_grids`)."""

    @property
    def split_axis(self) -> int:
        """The axis whose tiles the programs of a logical core of two take in turn (`_mine` in
        cost/kernels.py): the outer loop's, which is the first axis unless `outer` says."""
        return 0 if self.outer is None else self.outer

    def clippable(self, axis: int) -> bool:
        return self.clip_axes is None or axis in self.clip_axes


@dataclass(frozen=True)
class Timed:
    """Latency and the busy seconds of each engine ("dma": per queue, averaged over queues), on
    `cores` physical cores (2 for a logical core of LNC=2): averaged over the cores (`busy`), and
    of the core that had the most of each engine's work (`busiest`; the same on one core)."""

    seconds: float
    busy: dict
    busiest: dict
    cores: int = 1

    @property
    def bound(self) -> str:
        return max(self.busy, key=self.busy.get) if self.busy else "dma"


def _busy_by_engine(timeline, cores: int) -> tuple[dict[str, float], dict[str, float]]:
    """Busy seconds per engine, averaged over every lane the launch has (each of the `cores`
    cores' DMA queues and engines, whether or not it ran anything, so that the figure stays a sum
    over tiles, linear in their number), and on the core with the most of that engine's work."""
    per_lane = np.bincount(timeline.lane, weights=timeline.duration_s, minlength=len(timeline.lanes))
    per_core: dict[tuple[str, int], float] = {}
    for lane, (engine, core) in enumerate(timeline.lane_engines):
        per_core[engine.value, core] = per_core.get((engine.value, core), 0.0) + float(per_lane[lane])
    totals: dict[str, float] = {}
    busiest: dict[str, float] = {}
    for (name, _core), seconds in per_core.items():
        lanes = timeline.core.dma_queues if name == Engine.DMA.value else 1
        totals[name] = totals.get(name, 0.0) + seconds / (lanes * cores)
        busiest[name] = max(busiest.get(name, 0.0), seconds / lanes)
    return totals, busiest


@functools.lru_cache(maxsize=4096)
def exact(op: Blocked, dims: tuple[int, ...], target: str, lnc: int = 1) -> Timed:
    """Trace the kernel at `dims` without values and schedule it on `target`."""
    from trnsim.cost import kernels

    kernel = getattr(kernels, op.kernel)
    recorded = trace(kernel[lnc] if lnc > 1 else kernel, *op.args(dims), target=target)
    timeline = schedule.schedule(recorded, target)
    busy, busiest = _busy_by_engine(timeline, lnc)
    return Timed(timeline.latency_s, busy, busiest, lnc)


def _tiling(dims: tuple[int, ...], tiles: tuple[int, ...]) -> list[tuple[int, int]]:
    """(tile count, size of the last tile) along each dimension."""
    out = []
    for size, tile in zip(dims, tiles, strict=True):
        count = max(1, math.ceil(size / tile))
        out.append((count, size - (count - 1) * tile))
    return out


def _dims_at(counts, tiling, tiles) -> tuple[int, ...]:
    """The dimension sizes of a grid with `counts` tiles, keeping each last tile's size."""
    return tuple((c - 1) * t + last for c, t, (_n, last) in zip(counts, tiles, tiling, strict=True))


def _measures_slope(op: Blocked, lnc: int) -> bool:
    """Whether the fast tier needs a second grid for the slope (see the module docstring)."""
    return op.chained or lnc > 1


def _clipped_counts(op: Blocked, counts: list[int], lnc: int, wave: int) -> list[int]:
    """The grid the fast tier traces: halve a clippable axis until the grid has at most
    CLIP_TILES (SLOPE_CLIP_TILES) tiles, never below two tiles per core; a one-axis grid is cut to
    STREAM_CLIP_TILES plus its remainder modulo `wave` tiles (one per DMA queue of every core).
    A chained kernel halves its outermost axis first, so that each tile's chain along the inner
    axes stays whole; other grids halve their longest axis, keeping their proportions. Under
    LNC=2 the axis the cores split keeps the full count's parity (`_same_parity`), so that the
    same core runs the last, maybe partial, tile; causal attention, which may clip only that
    axis, keeps four tiles of it."""
    if len(counts) == 1 and op.clippable(0):
        return [min(counts[0], STREAM_CLIP_TILES + counts[0] % wave)]
    axes = [axis for axis in range(len(counts)) if op.clippable(axis)]
    limit = SLOPE_CLIP_TILES if _measures_slope(op, lnc) else CLIP_TILES
    # Halved for the slope, a grid still gives every core a tile.
    floors = [_same_parity(2 * lnc, n, lnc) if axis == op.split_axis else 2 * lnc
              for axis, n in enumerate(counts)]
    clipped = list(counts)
    while math.prod(clipped) > limit and any(clipped[axis] > floors[axis] for axis in axes):
        if op.chained:
            axis = next(axis for axis in axes if clipped[axis] > floors[axis])
        else:
            axis = max((a for a in axes if clipped[a] > floors[a]), key=lambda a: clipped[a])
        clipped[axis] = max(floors[axis], clipped[axis] // 2)
        if axis == op.split_axis:
            clipped[axis] = _same_parity(clipped[axis], counts[axis], lnc)
    return clipped


def _same_parity(count: int, total: int, lnc: int) -> int:
    """`count`, raised to the nearest count that leaves the split axis's last tile to the same
    program as `total` tiles do (programs take its tiles in turn: `_mine` in cost/kernels.py)."""
    return count + (total - count) % lnc


def _busy_at(op: Blocked, counts: list[int], tiling, target: str, lnc: int) -> dict[str, float]:
    """Busy seconds per engine at `counts`, multilinear in the full-tile counts: read off the
    corners of the 1..2 tile grid and extended along each axis."""
    busy: dict[str, float] = {}
    axes = [(1, 2) if n >= 2 and op.clippable(axis) else (n,) for axis, n in enumerate(counts)]
    for corner in itertools.product(*axes):
        weight = 1.0
        for n, c, axis in zip(counts, corner, axes, strict=True):
            if len(axis) == 2:
                weight *= (n - 1) if c == 2 else (2 - n)
        timed = exact(op, _dims_at(corner, tiling, op.tiles), target, lnc)
        for engine, seconds in timed.busy.items():
            busy[engine] = busy.get(engine, 0.0) + weight * seconds
    return busy


def _halved(op: Blocked, clipped: list[int], counts: list[int], wave: int, lnc: int) -> list[int]:
    """The second grid, for the slope: the clipped grid with the axis clipped most (then the
    longest) halved, measured along the way the full grid extends (along a matmul's contraction
    instead, each output tile's chain shortens and the slope came out 14% steep: docs/timing.md).
    That axis was clipped, so it holds at least two tiles (`_clipped_counts`). A one-axis grid
    loses one `wave` of tiles instead, keeping its last partial wave. Under LNC=2 the split axis
    keeps its parity (`_same_parity`)."""
    if len(clipped) == 1:
        return [clipped[0] - wave]
    axes = [axis for axis in range(len(clipped)) if op.clippable(axis)]
    axis = max(axes, key=lambda a: (counts[a] / clipped[a], clipped[a]))
    halved = clipped[axis] // 2
    if axis == op.split_axis:
        halved = _same_parity(halved, counts[axis], lnc)
    return [halved if a == axis else n for a, n in enumerate(clipped)]


def _outer_grids(op: Blocked, counts: list[int], lnc: int) -> tuple[list[int], list[int]] | None:
    """Two grids of whole iterations of the kernel's outer loop, every other axis in full: as
    many iterations as OUTER_CLIP_TILES holds (LNC2_OUTER_CLIP_TILES on a logical core of two,
    where that does not hold two grids), and about half as many; None when no outer loop is
    named or not two such grids fit below the full one. On a logical core of two, whose programs
    take the outer loop's iterations in turn, both grids keep the full loop's parity, so that
    the core with one iteration more runs the last (partial) tile in all three alike."""
    if op.outer is None:
        return None
    total = counts[op.outer]
    per_iteration = math.prod(counts) // total
    for budget in (OUTER_CLIP_TILES, LNC2_OUTER_CLIP_TILES)[:lnc]:
        longer = min(total - lnc, budget // per_iteration)
        longer -= (longer - total) % lnc  # lowered to the full loop's parity
        shorter = _same_parity(longer // 2, total, lnc)
        if 1 <= shorter < longer:
            return ([longer if axis == op.outer else n for axis, n in enumerate(counts)],
                    [shorter if axis == op.outer else n for axis, n in enumerate(counts)])
    return None


def _row_grids(op: Blocked, counts: list[int], clipped: list[int]) -> tuple[list[int], list[int]] | None:
    """Two grids of ROW_GRID and ROW_GRID_SMALL whole rows, every other axis in full; None unless
    the kernel names its rows, has at most FEW_OUTER outer iterations, the one grid (`clipped`)
    would cut an axis other than the rows, and the larger grid fits ROW_CLIP_TILES. The outer
    axis stays whole, so under LNC=2 each core keeps its share."""
    if op.rows is None or op.outer is None or counts[op.outer] > FEW_OUTER:
        return None
    if all(clipped[axis] == n for axis, n in enumerate(counts) if axis != op.rows):
        return None
    if ROW_GRID * math.prod(counts) // counts[op.rows] > ROW_CLIP_TILES:
        return None
    return ([ROW_GRID if axis == op.rows else n for axis, n in enumerate(counts)],
            [ROW_GRID_SMALL if axis == op.rows else n for axis, n in enumerate(counts)])


def _grids(op: Blocked, counts: list[int], lnc: int, wave: int) -> tuple[list[int], list[int] | None]:
    """The grid the fast tier traces, and the smaller one it measures a slope against (None: the
    first grid's fill and drain is added to the full grid's busiest engine, without a slope).
    Whole rows come first (a matmul of few column tiles: `_row_grids`), then whole outer-loop
    iterations (`_outer_grids`), then the one clipped grid. The full grid itself when it is no
    larger than the grids it would be extrapolated from, or than SLOPE_CLIP_TILES, as a clipped
    grid would be (fp8 (1166, 625, 2406) at LNC=2, 250 tiles: 5.1% over from 3 and 1 columns)."""
    clipped = _clipped_counts(op, counts, lnc, wave)
    whole = _row_grids(op, counts, clipped) or _outer_grids(op, counts, lnc)
    if whole is not None:
        smallest = max(sum(map(math.prod, whole)), SLOPE_CLIP_TILES)
        return (counts, None) if smallest >= math.prod(counts) else whole
    if clipped == counts or not _measures_slope(op, lnc):
        return clipped, None
    return clipped, _halved(op, clipped, counts, wave, lnc)


def _busiest_core(op: Blocked, counts: list[int], tiling, target: str, lnc: int) -> dict[str, float]:
    """Busy seconds per engine of the core with the most of that engine's work. Program p takes
    the split axis's tiles p, p + lnc, ...: ceil((n - p) / lnc) of them, the last one (maybe
    partial) if (n - 1) % lnc == p; each program's busy time is that of one core running its
    tiles (`_busy_at`). Program 0 has the most tiles, but the one with a partial last tile may
    move more bytes (a 4-byte tile under 2 KiB a row pays the small-transfer DMA rate)."""
    axis = op.split_axis
    count, last = tiling[axis]
    shares = {(-(-(count - p) // lnc), last if (count - 1) % lnc == p else op.tiles[axis])
              for p in range(min(lnc, count))}
    busiest: dict[str, float] = {}
    for share in shares:
        busy = _busy_at(op, [share[0] if a == axis else n for a, n in enumerate(counts)],
                        [share if a == axis else t for a, t in enumerate(tiling)], target, 1)
        for engine, seconds in busy.items():
            busiest[engine] = max(busiest.get(engine, 0.0), seconds)
    return busiest


@functools.lru_cache(maxsize=65536)
def fast(op: Blocked, dims: tuple[int, ...], target: str, lnc: int = 1) -> Timed:
    """The latency of the full grid, from its engines' busy times and one or two clipped grids.

    Every kernel: the full grid's busiest engine, plus the clipped grid's fill and drain (its
    latency less its own busiest engine's busy time; the two grids' busiest engines may differ:
    an fp8 matmul's clipped grid reloads its moving tiles more often, so DMA bounds it while
    TensorE bounds the full grid). With a slope (a chained kernel, LNC=2, an outer loop): at
    least the clipped grid's latency plus its bounding engine's extra busy time in the full grid,
    times the latency each busy second of it added between a smaller grid and the clipped one
    (`_grids`). Busy times are those of the busiest core (`Timed.busiest`); the result reports
    the average over the cores (`Timed.busy`)."""
    wave = core_spec(target).dma_queues * lnc  # an unknown or untimed target fails here
    tiling = _tiling(dims, op.tiles)
    counts = [n for n, _last in tiling]
    clipped, smaller = _grids(op, counts, lnc, wave)
    if clipped == counts:  # no larger than the grids it would be extrapolated from
        return exact(op, dims, target, lnc)
    busy = _busy_at(op, counts, tiling, target, lnc)
    busiest = busy if lnc == 1 else _busiest_core(op, counts, tiling, target, lnc)
    large = exact(op, _dims_at(clipped, tiling, op.tiles), target, lnc)
    seconds = max(busiest.values()) + large.seconds - max(large.busiest.values())
    if smaller is not None:
        small = exact(op, _dims_at(smaller, tiling, op.tiles), target, lnc)
        bound = max(large.busiest, key=large.busiest.get)
        slope = 1.0  # the bounding engine did no more work in the larger grid: each busy second adds one
        if large.busiest[bound] > small.busiest[bound]:
            slope = (large.seconds - small.seconds) / (large.busiest[bound] - small.busiest[bound])
        seconds = max(seconds, large.seconds + max(slope, 0.0) * (busiest[bound] - large.busiest[bound]))
    return Timed(seconds, busy, busiest, lnc)


current_runtime().on_reset(exact.cache_clear)  # the caches are the runtime's: reset empties them
current_runtime().on_reset(fast.cache_clear)
