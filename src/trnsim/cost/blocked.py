"""Time a built-in kernel whose work is a grid of tiles: exactly (trace it, schedule it) or fast
(trace a clipped grid of the same tiles, then add the work the clipped grid left out).

A `Blocked` op names a kernel in `trnsim.cost.kernels`, the tile size along each dimension it
loops over, and how to build the kernel's arguments from the dimension sizes. The fast tier rests
on two facts of the scheduler: the busy time of each engine is a sum over tiles, so it is exactly
multilinear in the number of full tiles per dimension (read off traces with 1 and 2 tiles), and
once the grid is a few tiles wide the pipeline is in its steady state, so a larger grid adds to
the latency what it adds to the busiest engine. The fast latency is the latency of a grid clipped
to `CLIP_TILES` tiles plus the extra busy time of the engine that bounds it, at least the full
grid's busiest engine plus the clipped grid's fill and drain (`fast`).
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

CLIP_TILES = 512
"""Tiles in the grid the fast tier traces (axes that may not be clipped count in full): enough for
the pipeline to reach its steady state, so that the fast tier agrees with the exact one within 5%
on tests/cost's grid; few enough to trace in ~0.1-0.2 s once per distinct clipped grid."""
STREAM_CLIP_TILES = 64
"""The same for one-axis grids (elementwise passes, copies): their steady state comes sooner. A
power of two, as is its half, like the DMA queue count: both grids end on the same queue pattern."""


@dataclass(frozen=True)
class Blocked:
    """A built-in kernel over a tile grid: `args(dims)` -> the kernel's arguments. The fast tier
    clips the grid along `clip_axes` only (default all): an axis whose tiles do different work
    (causal attention's key blocks) is traced in full."""

    kernel: str
    tiles: tuple[int, ...]
    args: Callable[[tuple[int, ...]], tuple]
    clip_axes: tuple[int, ...] | None = None

    def clippable(self, axis: int) -> bool:
        return self.clip_axes is None or axis in self.clip_axes


@dataclass(frozen=True)
class Timed:
    """Latency and the busy seconds of each engine ("dma": per queue, averaged over queues), on
    `cores` physical cores (2 for a logical core of LNC=2)."""

    seconds: float
    busy: dict
    cores: int = 1

    @property
    def bound(self) -> str:
        return max(self.busy, key=self.busy.get) if self.busy else "dma"


def _busy_by_engine(timeline, cores: int) -> dict[str, float]:
    """Busy seconds per engine, averaged over every lane the launch has: each of the `cores`
    cores' DMA queues and engines, whether or not it ran anything (so that the figure stays a sum
    over tiles, linear in their number)."""
    per_lane = np.bincount(timeline.lane, weights=timeline.duration_s, minlength=len(timeline.lanes))
    totals: dict[str, float] = {}
    for lane, (engine, _core) in enumerate(timeline.lane_engines):
        totals[engine.value] = totals.get(engine.value, 0.0) + float(per_lane[lane])
    lanes = {name: cores * (timeline.core.dma_queues if name == Engine.DMA.value else 1) for name in totals}
    return {name: total / lanes[name] for name, total in totals.items()}


@functools.lru_cache(maxsize=4096)
def exact(op: Blocked, dims: tuple[int, ...], target: str, lnc: int = 1) -> Timed:
    """Trace the kernel at `dims` without values and schedule it on `target`."""
    from trnsim.cost import kernels

    kernel = getattr(kernels, op.kernel)
    recorded = trace(kernel[lnc] if lnc > 1 else kernel, *op.args(dims), target=target)
    timeline = schedule.schedule(recorded, target)
    return Timed(timeline.latency_s, _busy_by_engine(timeline, lnc), lnc)


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


def _clipped_counts(op: Blocked, counts: list[int]) -> list[int]:
    """The grid the fast tier traces: the longest clippable axis halved until the grid has at
    most CLIP_TILES tiles, keeping its proportions; a one-axis grid cut to STREAM_CLIP_TILES."""
    if len(counts) == 1 and op.clippable(0):
        return [min(counts[0], STREAM_CLIP_TILES)]
    axes = [axis for axis in range(len(counts)) if op.clippable(axis)]
    clipped = list(counts)
    # Never below two tiles: the second grid halves an axis again, and the slope needs both.
    while math.prod(clipped) > CLIP_TILES and any(clipped[axis] > 2 for axis in axes):
        longest = max(axes, key=lambda axis: clipped[axis])
        clipped[longest] = max(2, clipped[longest] // 2)
    return clipped


def _halved(op: Blocked, clipped: list[int], counts: list[int]) -> list[int]:
    """The clipped grid with the axis clipped most (then the longest) halved: the second grid, for
    the slope, measured along the way the full grid extends (along a matmul's contraction instead,
    each output tile's chain shortens and the slope comes out steep: docs/timing.md). That axis was
    clipped, so it holds at least two tiles (`_clipped_counts`)."""
    axes = [axis for axis in range(len(clipped)) if op.clippable(axis)]
    axis = max(axes, key=lambda a: (counts[a] / clipped[a], clipped[a]))
    return [n // 2 if a == axis else n for a, n in enumerate(clipped)]


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


@functools.lru_cache(maxsize=65536)
def fast(op: Blocked, dims: tuple[int, ...], target: str, lnc: int = 1) -> Timed:
    """The latency of the full grid, extrapolated from two clipped grids of the same tiles.

    The larger clipped grid gives the latency, and both give how much latency each second of its
    bounding engine's busy time adds (1 when that engine never waits; more when dependencies leave
    it gaps). The full grid may be bound by another engine (an fp8 matmul's clipped grid reloads
    its moving tiles more often, so DMA bounds it while TensorE bounds the full grid): so the
    latency is at least every engine's full busy time plus the clipped grid's fill and drain."""
    core_spec(target)  # an unknown or untimed target fails here, with the catalog's error
    tiling = _tiling(dims, op.tiles)
    counts = [n for n, _last in tiling]
    large = _clipped_counts(op, counts)
    if large == counts:  # small enough to trace, or nothing may be clipped
        return exact(op, dims, target, lnc)
    busy = _busy_at(op, counts, tiling, target, lnc)
    large_s, large_busy = _seconds_and_busy(op, large, tiling, target, lnc)
    bound = max(large_busy, key=large_busy.get)
    small_s, small_busy = _seconds_and_busy(op, _halved(op, large, counts), tiling, target, lnc)
    slope = 1.0  # the bounding engine did no more work in the larger grid: each busy second adds one
    if large_busy[bound] > small_busy[bound]:
        slope = (large_s - small_s) / (large_busy[bound] - small_busy[bound])
    extrapolated = large_s + max(slope, 0.0) * (busy[bound] - large_busy[bound])
    fill_and_drain = large_s - large_busy[bound]
    return Timed(max(extrapolated, max(busy.values()) + fill_and_drain), busy, lnc)


def _seconds_and_busy(op: Blocked, counts: list[int], tiling, target: str, lnc: int):
    """Latency of the grid with `counts` tiles, and each engine's busy time in it."""
    return (exact(op, _dims_at(counts, tiling, op.tiles), target, lnc).seconds,
            _busy_at(op, counts, tiling, target, lnc))


current_runtime().on_reset(exact.cache_clear)  # the caches are the runtime's: reset empties them
current_runtime().on_reset(fast.cache_clear)
