"""Races between the cores of an LNC=2 launch on HBM, warned from the finished trace.

The two cores share HBM and run side by side: only `nisa.core_barrier` and `nisa.sendrecv` put
one core's work before the other's. When the cores touch the same bytes of an HBM tensor, at
least one writing, and no such meeting orders the two, the chip's result depends on timing,
while trnsim's threads happen to run in some order. The chip and the compiler accept such
kernels, so this is a `KernelWarning`, computed from the trace after the launch: the same in
every run, and in `simulate` and `trace` alike.

Each instruction gets a vector clock (how many instructions of each core happen before it),
joined where the scheduler meets the cores (`timing.schedule.core_meetings`: the k-th barriers, a
send and its receive). Only allocations both cores touch, one writing, can race. Per allocation, the accesses
of one core that neither precede nor follow an access of the other form one window of its
program order; within it, the exact byte ranges of each line are compared with the other's.
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_left, bisect_right
from itertools import groupby
from typing import NamedTuple

import numpy as np

from trnsim.core.isa import Memory
from trnsim.core.trace import Region, Trace
from trnsim.errors import KernelWarning, SourceLoc
from trnsim.timing.schedule import core_meetings

MAX_WARNINGS = 5
"""Racing pairs of lines warned one by one per launch; the rest are counted in one more warning."""


class _Access(NamedTuple):
    position: int  # in its core's program order
    clock: tuple[int, ...]  # per core, how many of its instructions happen before this one
    write: bool
    runs: np.ndarray  # [n, 2]: the contiguous byte ranges [start, end) it touches, sorted
    core: int
    name: str
    where: SourceLoc | None
    twin: tuple | None = None  # a write the other core makes too, from the same line to the same bytes


def warn(trace: Trace) -> None:
    """Warn about each pair of kernel lines whose accesses race (at most MAX_WARNINGS, then a count)."""
    races = sorted(_races(trace).values(), key=lambda race: (_line(race[0]), _line(race[1])))
    for later, earlier in races[:MAX_WARNINGS]:
        warnings.warn(_message(later, earlier), KernelWarning, stacklevel=2)
    if len(races) > MAX_WARNINGS:
        rest = races[MAX_WARNINGS][0]
        warnings.warn(f"{rest.where}: and {len(races) - MAX_WARNINGS} more pairs of lines where the two "
                      f"cores of LNC=2 race on HBM, from here on", KernelWarning, stacklevel=2)


def _line(access: _Access) -> tuple[str, int]:
    return (access.where.file, access.where.line) if access.where else ("", 0)


def _message(later: _Access, earlier: _Access) -> str:
    verb, earlier_verb = ("writes" if access.write else "reads" for access in (later, earlier))
    effect = "which write lands last" if later.write else f"what core {later.core} reads"
    return (f"{later.where}: core {later.core} {verb} bytes of {later.name!r} that core {earlier.core} "
            f"{earlier_verb} at {earlier.where}, with no nisa.core_barrier or nisa.sendrecv between them: "
            f"the two cores of LNC=2 race, so on the chip {effect} depends on timing. Fix: a "
            f"nisa.core_barrier (or a sendrecv) between the two, or disjoint regions for the two cores")


def _races(trace: Trace) -> dict[tuple, tuple[_Access, _Access]]:
    """Per pair of lines, one racing pair of accesses: (the one to warn at, the other). The warning
    is at the read of a write and a read, else at the higher core's write; of several pairs, the
    first in program order, so that the thread interleaving of the trace never changes it."""
    found: dict[tuple, tuple[_Access, _Access]] = {}
    for by_core, own_twins in _accesses(trace).values():
        for group, window in _concurrent(*by_core):
            lines = _by_line(window)
            for theirs in _by_line(group):
                for mine in lines:
                    a, b = mine.first, theirs.first
                    if (a.write or b.write) and not _alike(mine, theirs, own_twins) \
                            and _meet(mine.runs, theirs.runs):
                        race = (a, b) if b.write and not a.write else (b, a)
                        key = tuple(sorted((_line(a), _line(b))))
                        if key not in found or _rank(race) < _rank(found[key]):
                            found[key] = race
    return found


def _alike(x: _Group, y: _Group, own_twins: list[dict]) -> bool:
    """Twin writes are code both cores run whole (as nki-library's norm, QKV and MoE kernels do
    below their sharding thresholds): taken to write the same values, they race neither with
    each other nor with a read its core makes after its own copy of each of those writes (then
    either copy gives the reader the same values). (Telling values apart would take the values.)"""
    if x.twins and y.twins:
        return _line(x.first) == _line(y.first)
    read, twins = (x, y) if y.twins else (y, x)
    first_read = read.first
    return bool(twins.twins) and not first_read.write and all(
        own_twins[first_read.core].get(key, first_read.position) < first_read.position for key in twins.twins)


def _rank(race: tuple[_Access, _Access]) -> tuple:
    later, earlier = race
    return later.write, -later.core, later.position, earlier.position, later.name


def _accesses(trace: Trace) -> dict[int, tuple[list[list[_Access]], list[dict]]]:
    """Per HBM allocation that both cores touch and one writes: each core's accesses, in order, and
    where each core first makes each of its twin writes. (A program's private HBM tensor is touched
    by its core alone. An indirect DMA's rows come from values the trace does not hold: left out.)"""
    positions, clocks = _clocks(trace)
    found: dict[int, list[list[tuple]]] = {}
    for index, ins in enumerate(trace):
        indirect = ins.params.get("indirect")
        for write, regions in ((False, () if indirect == "src" else ins.inputs),
                               (True, () if indirect == "dst" else ins.outputs)):
            for region in regions:
                if region.memory is Memory.HBM:
                    by_core = found.setdefault(region.buffer, [[] for _ in range(trace.cores)])
                    by_core[ins.core].append((index, write, region))
    return {buffer: _twins([[_Access(positions[index], clocks[index], write, _runs(region), trace[index].core,
                                     region.name, trace[index].where) for index, write, region in accesses]
                            for accesses in by_core])
            for buffer, by_core in found.items()
            if all(by_core) and any(write for accesses in by_core for _, write, _ in accesses)}


def _twins(by_core: list[list[_Access]]) -> tuple[list[list[_Access]], list[dict]]:
    """The accesses with each write that both cores make (same line, same bytes) marked with that
    key, and per core the position of its first such write of each key."""
    keys = [{(_line(a), a.runs.tobytes()) for a in accesses if a.write} for accesses in by_core]
    both = keys[0] & keys[1]
    marked = [[a._replace(twin=key) if a.write and (key := (_line(a), a.runs.tobytes())) in both else a
               for a in accesses] for accesses in by_core]
    firsts = [{} for _ in marked]
    for accesses, first in zip(marked, firsts, strict=True):
        for a in accesses:
            if a.twin is not None:
                first.setdefault(a.twin, a.position)
    return marked, firsts


MAX_RUNS = 1 << 16
"""Contiguous runs listed per access; an access in more runs counts as its first-to-last byte range."""


def _runs(region: Region) -> np.ndarray:
    """The contiguous byte ranges an HBM operand touches: exact, so that accesses that interleave
    (every other column, a column block of each row) are not taken for overlapping."""
    offset, dims = region.offset, []
    for stride, count in region.pattern:  # the same set of elements in any dim order, strides > 0
        if count > 1:
            if stride < 0:
                offset, stride = offset + stride * (count - 1), -stride
            dims.append((stride, count))
    dims.sort(reverse=True)  # a transposed or permuted view: its contiguous runs merge again
    length = 1  # elements in one contiguous run: the inner dims that follow on from each other
    while dims and dims[-1][0] == length:
        length *= dims.pop()[1]
    if math.prod(count for _, count in dims) > MAX_RUNS:
        low, high = region.byte_span()
        return np.array([[low, high + 1]], np.int64)
    starts = np.full(1, offset, np.int64)
    for stride, count in dims:
        starts = np.add.outer(starts, stride * np.arange(count, dtype=np.int64)).ravel()
    starts, size = np.sort(starts), region.dtype_bytes
    runs = np.stack([np.floor(starts * size), np.ceil((starts + length) * size)], 1)
    return region.address_bytes + runs.astype(np.int64)


class _Group(NamedTuple):
    """One line's reads, or its writes, or its twin writes, in one window of program order."""

    first: _Access
    runs: np.ndarray  # the union of the runs its accesses touch
    twins: frozenset  # the twin keys of its writes


def _by_line(accesses: list[_Access]) -> list[_Group]:
    grouped: dict[tuple, list[_Access]] = {}
    for access in accesses:
        grouped.setdefault((_line(access), access.write, access.twin is not None), []).append(access)
    return [_Group(group[0], _union(np.concatenate([access.runs for access in group])),
                   frozenset(access.twin for access in group if access.twin is not None))
            for group in grouped.values()]


def _union(runs: np.ndarray) -> np.ndarray:
    """Sorted, disjoint byte ranges covering `runs`."""
    runs = runs[np.argsort(runs[:, 0], kind="stable")]
    ends = np.maximum.accumulate(runs[:, 1])
    fresh = np.ones(len(runs), bool)
    fresh[1:] = runs[1:, 0] > ends[:-1]
    firsts = np.flatnonzero(fresh)
    return np.stack([runs[firsts, 0], ends[np.r_[firsts[1:] - 1, len(runs) - 1]]], 1)


def _meet(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two unions of byte ranges share a byte."""
    before = np.searchsorted(x[:, 0], y[:, 1], "left") - 1  # x's last range starting before each of y's ends
    return bool(np.any((before >= 0) & (x[np.maximum(before, 0), 1] > y[:, 0])))


def _clocks(trace: Trace) -> tuple[list[int], list[tuple[int, ...]]]:
    """Per instruction, its position in its core's program order and its vector clock.

    Each core walks its instructions until a meeting whose partners have not arrived yet; then the
    other core walks. A core arriving at a meeting publishes its clock (its own count including
    the meeting), and leaves it with the latest of its partners' clocks."""
    waits = dict(core_meetings(trace))
    order: list[list[int]] = [[] for _ in range(trace.cores)]
    for index, ins in enumerate(trace):
        order[ins.core].append(index)
    positions, clocks = [0] * len(trace), [()] * len(trace)
    now = [(0,) * trace.cores for _ in order]
    arrived: dict[int, tuple[int, ...]] = {}
    at, moved = [0] * trace.cores, True
    while moved:
        moved = False
        for core, mine in enumerate(order):
            while at[core] < len(mine):
                index, position = mine[at[core]], at[core]
                partners = waits.get(index)
                if partners is not None:
                    clock = now[core]
                    arrived.setdefault(index, clock[:core] + (position + 1,) + clock[core + 1:])
                    if any(partner not in arrived for partner in partners):
                        break
                    now[core] = tuple(map(max, clock, *(arrived[partner] for partner in partners)))
                positions[index], clocks[index] = position, now[core]
                at[core], moved = position + 1, True
    return positions, clocks


def _concurrent(mine: list[_Access], theirs: list[_Access]):
    """(a group of theirs, the window of mine neither before nor after any of them). Mine that
    follow none of theirs before `b` and precede none of theirs after it are one window of `mine`,
    and consecutive accesses of theirs share it between meetings."""
    core, other = mine[0].core, theirs[0].core
    mine_positions = [a.position for a in mine]
    seen_by_other = [a.clock[other] for a in mine]  # never decreases along program order

    def window(b: _Access) -> tuple[int, int]:
        return bisect_left(mine_positions, b.clock[core]), bisect_right(seen_by_other, b.position)

    for (low, high), group in groupby(theirs, key=window):
        if low < high:
            yield list(group), mine[low:high]
