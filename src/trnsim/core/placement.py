"""On-chip placement as the compiler does it, settled once a launch is over.

While a kernel runs, a tile holds its SBUF or PSUM space for as long as Python refers to it. The
compiler holds the space only from the tile's first use to its last, so a kernel that keeps a
list of tiles it is done with, or that allocates a large tile per loop iteration, fits on the
chip although Python still holds everything. When the running allocation ran out of room
(`Allocator.replan`), `settle` places every tile of the launch again over its lifetime in the
trace, first fit. Where even that does not fit, SBUF tiles are spilled as a compiler spills: the
tile needed furthest in the future is stored to HBM and reloaded before its next use, and both
DMAs enter the trace, so the timeline pays for them. The only refusal left is an instruction
whose own operands do not fit at once (or PSUM tiles that are all still accumulating), which no
placement can fix.

`settle` also checks addresses the kernel chose (`address=`): two tiles on the same bytes are fine
while one is done before the other writes. A read of bytes that another tile wrote meanwhile
returns, on hardware, that other tile's bytes; trnsim keeps tiles apart, so it warns (strict mode:
refuses) instead of silently answering differently.
"""

from __future__ import annotations

import heapq
import warnings
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

from trnsim.core.isa import SPECS, Engine, Memory, Opcode
from trnsim.core.memory import Allocator, Placement, Span
from trnsim.core.trace import Instruction, Region, Trace, freeze_params
from trnsim.errors import CapacityError, HazardError, KernelWarning

NEVER = 1 << 62  # the next use of a tile that has none


def settle(trace: Trace, core: int, allocator: Allocator, strict: bool) -> None:
    """Finish the placement of one core's tiles in one memory (rewrites `trace` in place)."""
    if allocator.aliases:
        _check_aliases(trace, core, allocator, strict)
    if allocator.replan:
        _Plan(trace, core, allocator).run()


@dataclass(eq=False)
class _Tile:
    """One tile over the trace: where it is now, and whether HBM or the chip holds its values."""

    id: int
    placement: Placement
    uses: list[int]  # trace indices of the instructions that touch it, ascending
    address: int | None = None  # on chip now at this byte address; None: not on chip
    spilled: bool = False  # its values wait in HBM for a reload
    dirty: bool = False  # written since it was placed or last reloaded

    @property
    def name(self) -> str:
        return self.placement.span.name

    def next_use(self, index: int) -> int:
        after = bisect_right(self.uses, index)
        return self.uses[after] if after < len(self.uses) else NEVER

    def span(self, address: int) -> Span:
        size, partitions = self.placement.size_bytes, self.placement.partitions
        return Span(address, address + size, self.name, partitions.start, partitions.stop)


def _lifetimes(trace: Trace, core: int, allocator: Allocator) -> dict[int, _Tile]:
    """Every tile of the allocator that the core's instructions touch, with the indices of those."""
    memory, placed = allocator.memory, allocator.placed
    uses: dict[int, list[int]] = {}
    for index, ins in enumerate(trace):
        if ins.core != core:
            continue
        for region in ins.outputs + ins.inputs:
            if region.memory is memory and region.buffer in placed:
                seen = uses.setdefault(region.buffer, [index])
                if seen[-1] != index:
                    seen.append(index)
    return {tile: _Tile(tile, placed[tile], indices) for tile, indices in uses.items()}


class _Plan:
    """First-fit placement over lifetimes in trace order, with spills (SBUF) where it runs out."""

    def __init__(self, trace: Trace, core: int, allocator: Allocator):
        self.trace, self.core, self.memory = trace, core, allocator.memory
        self.room = Allocator(allocator.memory, allocator.bytes_per_partition, allocator.partitions,
                              allocator.bank_bytes)
        self.tiles = _lifetimes(trace, core, allocator)
        self.fixed = [t for t in self.tiles.values() if t.placement.explicit]  # the kernel chose these
        self.before: dict[int, list[Instruction]] = defaultdict(list)  # spill DMAs to insert
        self.rewritten: dict[int, Instruction] = {}

    def run(self) -> None:
        at_index: dict[int, list[_Tile]] = defaultdict(list)
        for tile in self.tiles.values():
            for index in tile.uses:
                at_index[index].append(tile)
        ending: list[tuple[int, int]] = []  # (last use, tile id) of tiles on chip
        for index in sorted(at_index):
            while ending and ending[0][0] < index:
                self._leave(self.tiles[heapq.heappop(ending)[1]])
            used = sorted(at_index[index], key=lambda t: not t.placement.explicit)
            for tile in used:
                if tile.address is None:
                    if not tile.spilled:
                        heapq.heappush(ending, (tile.uses[-1], tile.id))
                    self._bring(tile, index, used)
            self._rewrite(index)
        self.trace[:] = [ins for index, original in enumerate(self.trace)
                         for ins in (*self.before.get(index, ()), self.rewritten.get(index, original))]

    def _leave(self, tile: _Tile) -> None:
        self.room.free(tile.id)
        tile.address = None

    def _bring(self, tile: _Tile, index: int, used: list[_Tile]) -> None:
        """Put a tile on chip for instruction `index`, evicting others if it must."""
        if tile.placement.explicit:
            address = tile.placement.span.start
        else:
            address = self._find(tile, index)
            victims = self._victims(index, used) if address is None else []
            while address is None:
                if not victims:
                    raise self._full(tile, index)
                self._evict(victims.pop(), index)
                address = self._find(tile, index)
        self.room.hold(tile.id, tile.span(address))
        tile.address = address
        if tile.spilled:
            self.before[index].append(self._spill_dma(tile, index, store=False))
            tile.spilled = tile.dirty = False

    def _find(self, tile: _Tile, index: int) -> int | None:
        """First fit, also clear of kernel-placed tiles that become live during this one's life."""
        last = tile.uses[-1]
        ahead = [t.placement.span for t in self.fixed
                 if t.address is None and t.uses[0] <= last and t.uses[-1] >= index]
        placement = tile.placement
        return self.room.find(placement.size_bytes, placement.align_bytes, placement.partitions, ahead=ahead)

    def _victims(self, index: int, used: list[_Tile]) -> list[_Tile]:
        """SBUF tiles that may leave the chip, the one needed furthest ahead last (none in PSUM:
        its tiles accumulate)."""
        if self.memory is not Memory.SBUF:
            return []
        busy = {tile.id for tile in used}
        candidates = [self.tiles[t] for t in self.room.live if t not in busy]
        candidates = [t for t in candidates if not t.placement.explicit]
        return sorted(candidates, key=lambda t: t.next_use(index))

    def _evict(self, tile: _Tile, index: int) -> None:
        if tile.dirty:
            self.before[index].append(self._spill_dma(tile, index, store=True))
        self._leave(tile)
        tile.spilled = True

    def _spill_dma(self, tile: _Tile, index: int, store: bool) -> Instruction:
        """A DMA between the tile's bytes on chip and its spill slot in HBM (raw bytes both sides)."""
        size, partitions = tile.placement.size_bytes, tile.placement.partitions
        on_chip = Region(tile.id, tile.name, self.memory, tile.address, partitions.start, len(partitions),
                         ((1, size),), 0, "uint8", 1)
        in_hbm = Region(-1 - tile.id, f"spill:{tile.name}", Memory.HBM, 0, 0, 1,
                        ((size, len(partitions)), (1, size)), 0, "uint8", 1)
        outputs, inputs = ((in_hbm,), (on_chip,)) if store else ((on_chip,), (in_hbm,))
        kind = "store" if store else "reload"
        return Instruction(Opcode.DMA_COPY, Engine.DMA, outputs, inputs, freeze_params({"spill": kind}),
                           self.trace[index].where, f"spill {kind} {tile.name}", self.core)

    def _rewrite(self, index: int) -> None:
        """The instruction with its operands at the addresses the plan gave their tiles."""
        ins = self.trace[index]
        outputs, inputs = self._moved(ins.outputs), self._moved(ins.inputs)
        for region in ins.outputs:
            tile = self.tiles.get(region.buffer) if region.memory is self.memory else None
            if tile is not None:
                tile.dirty = True
        if outputs is not ins.outputs or inputs is not ins.inputs:
            self.rewritten[index] = Instruction(ins.opcode, ins.engine, outputs, inputs, ins.params,
                                                ins.where, ins.name, ins.core)

    def _moved(self, regions: tuple[Region, ...]) -> tuple[Region, ...]:
        """The regions at their tiles' planned addresses (the same tuple when none moved)."""
        moved = None
        for k, region in enumerate(regions):
            tile = self.tiles.get(region.buffer) if region.memory is self.memory else None
            if tile is not None and tile.address != region.address_bytes:
                moved = moved or list(regions)
                moved[k] = Region(*region[:3], tile.address, *region[4:])  # the address is field 3
        return regions if moved is None else tuple(moved)

    def _full(self, tile: _Tile, index: int) -> CapacityError:
        """No placement can run this instruction: say what it needs and what holds the rest."""
        ins, memory = self.trace[index], self.memory.value.upper()
        live = ", ".join(f"{s.name} {s.end - s.start} B" for s in
                         sorted(self.room.live.values(), key=lambda s: s.start)) or "nothing"
        size, capacity = tile.placement.size_bytes, self.room.bytes_per_partition
        free = capacity - self.room.live_bytes()
        why = ("every other tile on chip is an operand of this instruction or was placed by the kernel"
               if self.memory is Memory.SBUF else "PSUM tiles are not spilled")
        return CapacityError(f"{memory} cannot hold this instruction's operands at once: tile {tile.name!r} "
                             f"needs {size} B per partition, {free} of {capacity} B are free and {why} "
                             f"(live: {live})", memory=self.memory.value, required=size, available=free,
                             where=ins.where, op=SPECS[ins.opcode].nki_name,
                             hint="use smaller tiles, or fewer of them in one instruction")


def _box(region: Region) -> tuple[int, int, int, int]:
    """(first partition, end partition, first byte, last byte) an on-chip operand touches."""
    first, last = region.byte_span()
    return region.partition_start, region.partition_start + region.partition_count, first, last


def _meets(a: tuple, b: tuple) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] <= b[3] and b[2] <= a[3]


def _clip(box: tuple, span: Span) -> tuple:
    return (max(box[0], span.first_partition), min(box[1], span.end_partition),
            max(box[2], span.start), min(box[3], span.end - 1))


def _minus(box: tuple, cut: tuple) -> list[tuple]:
    """The parts of `box` outside `cut` (at most four boxes)."""
    if not _meets(box, cut):
        return [box]
    p0, p1, b0, b1 = box
    q0, q1 = max(p0, cut[0]), min(p1, cut[1])
    parts = [(p0, q0, b0, b1), (q1, p1, b0, b1), (q0, q1, b0, cut[2] - 1), (q0, q1, cut[3] + 1, b1)]
    return [part for part in parts if part[0] < part[1] and part[2] <= part[3]]


def _check_aliases(trace: Trace, core: int, allocator: Allocator, strict: bool) -> None:
    """Warn (strict: raise) at the first read of bytes another kernel-placed tile overwrote."""
    partners: dict[int, list[int]] = defaultdict(list)
    for earlier, later in allocator.aliases:
        partners[earlier].append(later)
        partners[later].append(earlier)
    spans = {tile: allocator.placed[tile].span for tile in partners}
    clobbered: dict[int, list[tuple]] = defaultdict(list)  # tile -> (box, instruction) others wrote over it
    memory = allocator.memory
    for ins in trace:
        if ins.core != core:
            continue
        for region in ins.inputs:
            if region.memory is memory and region.buffer in partners:
                box = _box(region)
                for written, writer in clobbered[region.buffer]:
                    if _meets(written, box):
                        return _report(ins, writer, spans[region.buffer], strict)
        for region in ins.outputs:
            if region.memory is memory and region.buffer in partners:
                box = _box(region)
                clobbered[region.buffer] = [(part, writer) for old, writer in clobbered[region.buffer]
                                            for part in _minus(old, box)]
                for other in partners[region.buffer]:
                    clip = _clip(box, spans[other])
                    if clip[0] < clip[1] and clip[2] <= clip[3]:
                        clobbered[other].append((clip, ins))


def _report(reader: Instruction, writer: Instruction, span: Span, strict: bool) -> None:
    message = (f"reads tile {span.name!r}, but {writer.where} ({SPECS[writer.opcode].nki_name}) wrote over "
               f"those bytes through another tile placed at the same address; on hardware this read "
               f"returns that tile's bytes, while trnsim keeps the two apart")
    if strict:
        raise HazardError(message, where=reader.where, op=SPECS[reader.opcode].nki_name,
                          hint="give the tiles separate addresses, or finish one before writing the other")
    warnings.warn(f"{reader.where}: {SPECS[reader.opcode].nki_name}: {message}", KernelWarning, stacklevel=2)
