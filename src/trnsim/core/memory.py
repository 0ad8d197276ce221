"""HBM tensors and the two on-chip memories, SBUF and PSUM, as 128 partitions x bytes.

A `Buffer` is one allocation: a flat numpy array of its storage dtype (None when only tracing)
plus, on chip, a byte address that is the same in every partition it spans. A `View` is a
strided window on a buffer (shape, strides and offset in elements), so slicing, permuting,
broadcasting and `.ap()` patterns never copy. `Allocator` places on-chip buffers first-fit while
the kernel runs (space comes back when Python drops a tile); when that runs out, core/placement.py
places them again after the launch over their lifetimes in the trace, as the compiler does.
`HbmBudget` counts HBM, whose size is one core's share of its chip's HBM, and a launch's
`LaunchState` lets a tile kept past its launch be refused.

New memory is filled as the official simulator fills it (NaN for floats, 4 for integers) so
reads of uninitialised data show up; with `config.override(strict=True)` such reads raise.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from bisect import bisect_left, insort
from dataclasses import dataclass
from heapq import merge
from math import prod

import numpy as np

from trnsim import hardware
from trnsim.core.isa import Memory
from trnsim.core.runtime import current as current_runtime
from trnsim.core.trace import Region
from trnsim.errors import CapacityError, HazardError, ShapeError

UNINITIALISED_INT = 4  # the official simulator's fill for integer tiles (reference nki.md §3.2)


@dataclass(frozen=True, slots=True)
class DType:
    """An NKI dtype: its name, numpy storage dtype, and how many elements one stored item packs
    (4 for the x4 MX types; views and regions count stored items)."""

    name: str
    numpy: np.dtype
    elements_per_word: int = 1

    @property
    def item_bytes(self) -> int:
        """Bytes per stored item (an x4 type stores four elements in one item)."""
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self.elements_per_word == 1 and self.numpy.kind not in "iub"

    def fill_value(self):
        return np.nan if self.is_float else UNINITIALISED_INT


class Buffer:
    """One allocation: HBM tensor, SBUF tile or PSUM tile.

    `queue` is the running core's queue of deferred instructions (core/deferred.py): reading values
    through a view runs it first. A `clone()` shares the values (and the fp32 shadow) but not the
    allocation, so queued instructions can hold a tile without keeping its space live.
    New memory gets its uninitialised fill when first read or partly written (`values()`): a first
    write that covers the whole buffer (a DMA into a fresh tile) skips that pass."""

    __slots__ = ("id", "memory", "name", "shape", "dtype", "address_bytes", "row_bytes", "data",
                 "written", "accum", "region", "_shared", "base_partition", "queue", "launch", "__weakref__")

    def __init__(self, id_: int, memory: Memory, name: str, shape: tuple[int, ...], dtype: DType,
                 address_bytes: int, data: np.ndarray | None, written: np.ndarray | None,
                 region: str = ""):
        self.id = id_
        self.region = region or memory.value  # e.g. "shared_hbm": which HBM space, for NKI
        self._shared = _Shared()
        self.base_partition = 0  # first partition of an on-chip tile (NKI address=(partition, byte))
        self.queue = None
        self.launch = _NO_LAUNCH  # the launch that made it: `LaunchState.over` once that has ended
        self.memory = memory
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.address_bytes = address_bytes
        # Bytes one partition holds; HBM is linear, so there the whole tensor is one "row".
        count = prod(shape[1:]) if memory is not Memory.HBM else prod(shape)
        self.row_bytes = int(count * dtype.numpy.itemsize)
        self.data = data
        self.written = written
        # PSUM only: which elements belong to an open matmul accumulation group.
        self.accum = None
        if memory is Memory.PSUM and data is not None:
            self.accum = current_runtime().pool.empty(len(data), np.bool_)
            self.accum.fill(False)

    @property
    def shadow(self) -> np.ndarray | None:
        """fp32 copy of `data` for repeated matmul reads; dropped on every write."""
        return self._shared.shadow

    @shadow.setter
    def shadow(self, values: np.ndarray | None) -> None:
        self._shared.shadow = values
        self._shared.windows = {}

    def values(self) -> np.ndarray | None:
        """The stored values (flat), given the uninitialised fill first if it is still owed.

        The flag drops only once the fill is done, under a lock: the two cores of an LNC=2 launch
        (threads) write halves of one shared-HBM output, and neither may write before the fill."""
        shared = self._shared
        if shared.unfilled:
            with current_runtime().fill_lock:
                if shared.unfilled:
                    fill_uninitialised(self.data, self.dtype)
                    shared.unfilled = False
        return self.data

    def clone(self) -> Buffer:
        """The same values, written flags and shadow, without the allocation (no finaliser)."""
        twin = Buffer.__new__(Buffer)
        for name in _CLONED:
            setattr(twin, name, getattr(self, name))
        twin.queue = None
        return twin

    def __repr__(self) -> str:
        return f"{self.memory.value}:{self.name}{list(self.shape)} {self.dtype.name}"


_CLONED = tuple(name for name in Buffer.__slots__ if name not in ("queue", "__weakref__"))


class LaunchState:
    """Whether the launch that made a set of buffers has ended. A tile a kernel keeps (in a global or
    a closure) outlives its launch; a later launch must refuse it, not read or write it silently."""

    __slots__ = ("over",)

    def __init__(self):
        self.over = False


_NO_LAUNCH = LaunchState()
"""The state of buffers made outside a launch (unit tests): never over."""


class _Shared:
    """What a buffer shares with its clones, so a write through one is seen by all: the fp32
    shadow and its windows that matmuls read (dropped on every write), and whether the
    uninitialised fill is still owed."""

    __slots__ = ("shadow", "windows", "unfilled")

    def __init__(self):
        self.shadow = None
        self.windows = {}  # (offset, shape, strides) -> that window of the shadow
        self.unfilled = False


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes [start, end) of partitions [first_partition, end_partition) held by one tile."""

    start: int
    end: int
    name: str
    first_partition: int = 0
    end_partition: int = 1 << 30

    def overlaps(self, start: int, end: int, partitions: range) -> bool:
        return (self.start < end and start < self.end
                and self.first_partition < partitions.stop and partitions.start < self.end_partition)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a tile was put when the kernel made it, and whether the kernel chose the address."""

    span: Span
    explicit: bool
    align_bytes: int

    @property
    def size_bytes(self) -> int:
        return self.span.end - self.span.start

    @property
    def partitions(self) -> range:
        return range(self.span.first_partition, self.span.end_partition)


def _span_start(span: Span) -> int:
    return span.start


class Allocator:
    """Places the tiles of one on-chip memory at one byte address in all their partitions.

    While a kernel runs, a tile holds its space from `nl.ndarray` until Python drops it. The
    compiler is less wasteful: a tile's space is free after its last use. So when first-fit finds
    no room (Python still holds tiles the kernel is done with), the tile is placed past the end
    and `replan` is set; once the launch is over, core/placement.py places every tile over its
    real lifetime in the trace, spilling to HBM where even that does not fit. Addresses the kernel
    chose (`address=`) are honoured even over other tiles, as on hardware: `aliases` lists those
    pairs so placement can warn when one tile's bytes are overwritten while still in use.
    Only what the chip cannot hold at all is refused here: a tile wider than a partition."""

    def __init__(self, memory: Memory, bytes_per_partition: int, partitions: int,
                 bank_bytes: int | None = None):
        self.memory = memory
        self.bytes_per_partition = bytes_per_partition
        self.partitions = partitions
        self.bank_bytes = bank_bytes
        self.live: dict[int, Span] = {}
        self.by_start: list[Span] = []  # the live spans in address order
        self.placed: dict[int, Placement] = {}  # every tile of the launch, for core/placement.py
        self.replan = False
        self.aliases: list[tuple[int, int]] = []  # (earlier, later) kernel-placed tiles that overlap
        self._lock = threading.Lock()

    def allocate(self, buffer_id: int, size_bytes: int, name: str, address: int | None = None,
                 align_bytes: int = 1, partitions: range | None = None) -> int:
        """Place a tile (natural alignment: its element size) and return its byte address."""
        with self._lock:  # a tile's finaliser may free space from another thread (LNC=2 cores)
            return self._allocate(buffer_id, size_bytes, name, address, align_bytes, partitions)

    def _allocate(self, buffer_id: int, size_bytes: int, name: str, address: int | None,
                  align_bytes: int, partitions: range | None) -> int:
        size_bytes = max(size_bytes, 1)
        partitions = partitions if partitions is not None else range(self.partitions)
        if size_bytes > self.bytes_per_partition:
            raise CapacityError(f"{self.memory.value.upper()} tile {name!r} needs {size_bytes} B per "
                                f"partition; a partition holds {self.bytes_per_partition} B",
                                memory=self.memory.value, required=size_bytes,
                                available=self.bytes_per_partition, hint="split the tile along its free dims")
        explicit = address is not None
        if explicit:
            self._check_placement(address, size_bytes, name, align_bytes)
            self._note_overlaps(buffer_id, address, address + size_bytes, partitions)
        else:
            address = self.find(size_bytes, align_bytes, partitions)
            if address is None:
                self.replan = True
                address = self.find(size_bytes, align_bytes, partitions, limit=None)
        span = Span(address, address + size_bytes, name, partitions.start, partitions.stop)
        self.hold(buffer_id, span)
        self.placed[buffer_id] = Placement(span, explicit, align_bytes)
        return address

    def hold(self, buffer_id: int, span: Span) -> None:
        """Mark a span taken (kept in address order too, for `find`)."""
        self.live[buffer_id] = span
        insort(self.by_start, span, key=_span_start)

    def free(self, buffer_id: int) -> None:
        with self._lock:
            span = self.live.pop(buffer_id, None)
            if span is not None:
                at = bisect_left(self.by_start, span.start, key=_span_start)
                while self.by_start[at] is not span:
                    at += 1
                del self.by_start[at]

    def live_bytes(self) -> int:
        return sum(s.end - s.start for s in self.live.values())

    def find(self, size_bytes: int, align_bytes: int, partitions: range, limit: int | None = -1,
             ahead: list[Span] = ()) -> int | None:
        """The lowest address where a tile fits next to the live ones (and the spans `ahead`), or
        None; `limit=None` looks past the end of the memory too (always succeeds).

        One pass over the spans on the tile's partitions in address order: the candidate start
        moves past each span it would overlap, so the first gap that holds the tile wins."""
        limit = self.bytes_per_partition if limit == -1 else limit
        first, stop = partitions.start, partitions.stop
        spans = self.by_start
        if ahead:
            spans = list(merge(spans, sorted(ahead, key=_span_start), key=_span_start))
        banked = self.bank_bytes is not None
        start = self._fix_start(0, size_bytes, align_bytes)
        for span in spans:
            if span.start >= start + size_bytes:
                break
            if span.end > start and span.first_partition < stop and first < span.end_partition:
                start = -(-span.end // align_bytes) * align_bytes  # _fix_start without banks (hot)
                if banked:
                    start = self._fix_start(start, size_bytes, align_bytes)
        return start if limit is None or start + size_bytes <= limit else None

    def _fix_start(self, start: int, size_bytes: int, align_bytes: int) -> int:
        start = -(-start // align_bytes) * align_bytes
        bank = self.bank_bytes
        if bank and size_bytes <= bank and start // bank != (start + size_bytes - 1) // bank:
            start = -(-start // bank) * bank
        if bank and size_bytes > bank:
            start = -(-start // bank) * bank
        return start

    def _note_overlaps(self, buffer_id: int, start: int, end: int, partitions: range) -> None:
        """A kernel-chosen address over live tiles: fine on hardware, if the earlier tile is done."""
        for other, span in self.live.items():
            if span.overlaps(start, end, partitions):
                if self.placed[other].explicit:
                    self.aliases.append((other, buffer_id))
                else:
                    self.replan = True  # an automatic tile in the way: placement moves it

    def _check_placement(self, address: int, size_bytes: int, name: str, align_bytes: int) -> None:
        end = address + size_bytes
        if address < 0 or end > self.bytes_per_partition:
            raise CapacityError(f"{self.memory.value.upper()} tile {name!r} at address {address} with "
                                f"{size_bytes} B per partition exceeds {self.bytes_per_partition} B",
                                memory=self.memory.value, required=end, available=self.bytes_per_partition)
        if address % align_bytes:
            raise CapacityError(f"{self.memory.value.upper()} tile {name!r} address {address} is not "
                                f"aligned to {align_bytes} B", memory=self.memory.value,
                                hint=f"use a multiple of {align_bytes}")
        bank = self.bank_bytes
        if bank and (address // bank != (end - 1) // bank) and (size_bytes <= bank or address % bank):
            raise CapacityError(f"PSUM tile {name!r} at bytes [{address}, {end}) crosses a {bank} B bank "
                                f"boundary", memory=self.memory.value, required=size_bytes,
                                available=bank - address % bank,
                                hint="start PSUM tiles at a bank boundary (a multiple of the bank size)")


class View:
    """A strided window on a buffer: `shape`, `strides` and `offset` count elements of `dtype`."""

    __slots__ = ("storage", "shape", "strides", "offset", "element")

    def __init__(self, storage: Buffer, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                 element: DType | None = None):
        self.storage = storage
        self.shape = shape
        self.strides = strides
        self.offset = offset
        self.element = element or storage.dtype

    @property
    def memory(self) -> Memory:
        return self.storage.memory

    def array(self) -> np.ndarray:
        """The numpy window on the buffer's values (writable; no copy), after any queued
        instructions have run."""
        queue = self.storage.queue
        if queue:
            queue.flush()
        data = self.storage.values()
        if data is None:
            raise HazardError(f"{self.storage!r} has no values: this run records the trace only",
                              hint="use trnsim.nki.simulate to get values")
        return self._window(data)

    def _window(self, data: np.ndarray) -> np.ndarray:
        size = self.element.numpy.itemsize
        return np.ndarray(self.shape, self.element.numpy, data, self.offset * size,
                          tuple(s * size for s in self.strides))

    def on(self, storage: Buffer) -> View:
        """The same window on another Buffer object (a clone of this one's)."""
        return View(storage, self.shape, self.strides, self.offset, self.element)

    def written_mask(self) -> np.ndarray:
        size = self.element.numpy.itemsize
        base = self.storage.dtype.numpy.itemsize
        if size != base:
            return np.ones(self.shape, bool)  # reinterpreting views: tracked per buffer dtype only
        return np.ndarray(self.shape, np.bool_, self.storage.written, self.offset,
                          tuple(self.strides))

    def covers_buffer(self) -> bool:
        """Whether the view is every element of its buffer, in storage order."""
        data = self.storage.data
        if self.offset or data is None:
            return False
        whole = self._window(data)
        return whole.flags.c_contiguous and whole.nbytes == data.nbytes

    def will_overwrite(self) -> None:
        """The caller writes every element of this view next: if that is the whole buffer, the
        uninitialised fill the buffer still owes is skipped (nothing could ever read it)."""
        shared = self.storage._shared
        if shared.unfilled and self.covers_buffer():
            shared.unfilled = False

    def assign(self, values: np.ndarray) -> None:
        """Store values (already in this view's dtype and shape, or broadcastable)."""
        if not self.storage.queue:  # queued instructions may still write parts of it first
            self.will_overwrite()
        self.array()[...] = values

    def mark_written(self) -> None:
        if self.storage.written is not None:
            self.written_mask()[...] = True

    def region(self) -> Region:
        """The trace's description of this operand (no values)."""
        buffer, element = self.storage, self.element
        pairs = tuple(zip(self.strides, self.shape, strict=False))  # always equal lengths: no check
        item_bytes = element.numpy.itemsize
        if buffer.memory is Memory.HBM:
            return Region(buffer.id, buffer.name, buffer.memory, buffer.address_bytes, 0, 1, pairs,
                          self.offset, element.name, item_bytes)
        row = buffer.row_bytes // item_bytes
        start, free_offset = divmod(self.offset, row) if row else (0, self.offset)
        count = self.shape[0] if self.shape else 1
        return Region(buffer.id, buffer.name, buffer.memory, buffer.address_bytes,
                      start + buffer.base_partition, count, pairs[1:], free_offset, element.name, item_bytes)


class GatherView(View):
    """Columns picked by index (trn3 tensor indirection): element [p, i] is element `columns[p, i]`
    of partition p's contiguous row of `reach` elements. Reads copy; writes go through `assign`.
    `columns` is None when only tracing; the region then covers the whole row."""

    __slots__ = ("columns", "reach")

    def __init__(self, storage: Buffer, shape: tuple[int, int], partition_stride: int, offset: int,
                 element: DType, columns: np.ndarray | None, reach: int):
        super().__init__(storage, shape, (partition_stride, 1), offset, element)
        self.columns = columns
        self.reach = reach

    def on(self, storage: Buffer) -> GatherView:
        return GatherView(storage, self.shape, self.strides[0], self.offset, self.element, self.columns,
                          self.reach)

    def _rows(self, data: np.ndarray, dtype: np.dtype) -> np.ndarray:
        size = np.dtype(dtype).itemsize
        return np.ndarray((self.shape[0], self.reach), dtype, data, self.offset * size,
                          (self.strides[0] * size, size))

    def _picked(self) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(self.shape[0])[:, None], self.columns

    def array(self) -> np.ndarray:
        if self.storage.data is None:
            return super().array()  # raises: this run keeps no values
        return self._rows(self.storage.values(), self.element.numpy)[self._picked()]

    def written_mask(self) -> np.ndarray:
        return self._rows(self.storage.written, np.bool_)[self._picked()]

    def assign(self, values: np.ndarray) -> None:
        self._rows(self.storage.values(), self.element.numpy)[self._picked()] = values

    def mark_written(self) -> None:
        if self.storage.written is not None:
            self._rows(self.storage.written, np.bool_)[self._picked()] = True

    def region(self) -> Region:
        """The row span the columns fall in, as `count` steps (so per-partition sizes stay right)."""
        row = View(self.storage, (self.shape[0], self.reach), self.strides, self.offset,
                   self.element).region()
        count = self.shape[1]
        low, high = (0, self.reach - 1) if self.columns is None else (int(self.columns.min()),
                                                                       int(self.columns.max()))
        step = max(1, -(-(high - low) // (count - 1))) if count > 1 else 1
        return row._replace(pattern=((step, count),), offset=row.offset + low)


class HbmBudget:
    """The HBM one launch may fill: its capacity, and the bytes its live HBM tensors (kernel inputs
    and the tensors the kernel makes) hold. Shared by the cores of a launch (LNC=2 threads)."""

    def __init__(self, capacity_bytes: int, basis: str):
        self.capacity_bytes = capacity_bytes
        self.basis = basis  # where the capacity comes from, for messages
        self.live: dict[int, tuple[str, int]] = {}
        self.used_bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def of_target(cls, target: str, cores: int = 1) -> HbmBudget:
        """Each NeuronCore's share of its chip's HBM (`hbm_bytes` / `cores` in trnsim.hardware), times
        the physical cores of the launch: the two cores of an LNC=2 launch share one address space."""
        chip = hardware.chip(target)
        basis = f"{target}: {_bytes_text(chip.hbm_bytes)} of HBM shared by {chip.cores} NeuronCores"
        if cores > 1:
            basis += f", {cores} of them in this launch"
        return cls(chip.hbm_bytes // chip.cores * cores, basis)

    def check(self, size_bytes: int, name: str) -> None:
        """Raise CapacityError if a tensor of `size_bytes` does not fit next to the live ones."""
        free = self.capacity_bytes - self.used_bytes
        if size_bytes > free:
            live = ", ".join(f"{n} {_bytes_text(b)}" for n, b in self.live.values()) or "nothing"
            raise CapacityError(f"HBM is full: tensor {name!r} needs {_bytes_text(size_bytes)}, "
                                f"{_bytes_text(free)} of {_bytes_text(self.capacity_bytes)} are free "
                                f"({self.basis}; live: {live})", memory="hbm", required=size_bytes,
                                available=free, hint="use smaller tensors or split the work over launches")

    def take(self, buffer_id: int, size_bytes: int, name: str) -> None:
        with self._lock:
            self.check(size_bytes, name)
            self.live[buffer_id] = (name, size_bytes)
            self.used_bytes += size_bytes

    def release(self, buffer_id: int) -> None:
        with self._lock:
            self.used_bytes -= self.live.pop(buffer_id, ("", 0))[1]


def _bytes_text(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def check_shape(shape: tuple[int, ...], what: str) -> None:
    """Every dim of a shape is at least 1: a zero-size or negative dim is a kernel bug. `what` names
    the shape's owner in the message ("tensor 'x'", "reshape of 'x'")."""
    if any(type(size) is not int or size < 1 for size in shape):
        raise ShapeError(f"{what}: shape {list(shape)}; every dim must be an integer of at least 1")


class MemorySystem:
    """The memories of one NeuronCore run: SBUF and PSUM allocators, the launch's HBM budget (None:
    HBM is not counted, as in unit tests of the on-chip memories) and buffer creation."""

    def __init__(self, sbuf: Allocator, psum: Allocator, with_values: bool, track_writes: bool,
                 ids: itertools.count, queue=None, hbm: HbmBudget | None = None):
        self.allocators = {Memory.SBUF: sbuf, Memory.PSUM: psum}
        self.queue = queue  # the core's deferred-instruction queue, given to every buffer it makes
        self.with_values = with_values
        self.track_writes = track_writes
        self._ids = ids  # shared by the cores of one launch, so buffer ids are unique in a trace
        self.hbm = hbm
        self.launch = LaunchState()  # given to every buffer made here; `end_launch` ends it

    def end_launch(self) -> None:
        """The launch is over: the buffers it made refuse to be used by a later one."""
        self.launch.over = True

    def allocate(self, memory: Memory, shape: tuple[int, ...], dtype: DType, name: str,
                 address: int | tuple[int, int] | None = None, values: np.ndarray | None = None,
                 region: str = "") -> Buffer:
        """A new buffer (filled as uninitialised unless `values` is given) and its placement.

        `address` is a byte address, or (base partition, byte address) as NKI's `address=` takes.
        The shape, partitions and capacity are checked before anything is allocated on the host."""
        check_shape(shape, f"tensor {name!r}")
        buffer_id = next(self._ids)
        base, address = address if isinstance(address, tuple) else (0, address)
        address_bytes, release = self._place(memory, shape, dtype, name, buffer_id, base, address)
        try:
            data, written = self._host_arrays(memory, prod(shape), dtype, values)
        except BaseException:
            if release is not None:
                release(buffer_id)
            raise
        buffer = Buffer(buffer_id, memory, name, tuple(shape), dtype, address_bytes, data, written, region)
        buffer.base_partition = base
        buffer.queue = self.queue
        buffer.launch = self.launch
        buffer._shared.unfilled = data is not None and values is None
        if release is not None:
            weakref.finalize(buffer, release, buffer_id)
        return buffer

    def _place(self, memory: Memory, shape: tuple[int, ...], dtype: DType, name: str, buffer_id: int,
               base: int, address: int | None) -> tuple[int, object]:
        """Reserve the buffer's space: (its byte address, the function that frees it, or None)."""
        allocator = self.allocators.get(memory)
        if allocator is None:
            if self.hbm is None:
                return 0, None
            self.hbm.take(buffer_id, prod(shape) * dtype.numpy.itemsize, name)
            return 0, self.hbm.release
        used = range(base, base + (shape[0] if shape else 1))
        if used.stop > allocator.partitions or base < 0:
            raise ShapeError(f"tile {name!r} has {used.stop - used.start} partitions starting at "
                             f"{used.start}; the limit is {allocator.partitions}",
                             hint="split the tile along dim 0")
        row_bytes = int(prod(shape[1:]) * dtype.numpy.itemsize)
        placed = allocator.allocate(buffer_id, row_bytes, name, address, dtype.numpy.itemsize, used)
        return placed, allocator.free

    def _host_arrays(self, memory: Memory, count: int, dtype: DType, values: np.ndarray | None):
        """The buffer's values and written flags (None when only tracing, or flags not kept)."""
        if not self.with_values:
            return None, None
        if values is not None:
            data = np.ascontiguousarray(values, dtype.numpy).reshape(-1)
            if not data.flags.writeable:  # a read-only input (np.frombuffer) that a kernel may write
                data = data.copy()
        else:
            data = current_runtime().pool.empty(count, dtype.numpy)  # filled on first use: Buffer.values
        written = None
        if self.track_writes or memory is Memory.PSUM:
            written = current_runtime().pool.empty(count, np.bool_)
            written.fill(values is not None)
        return data, written


def fill_uninitialised(data: np.ndarray, dtype: DType) -> None:
    """Fill with the uninitialised pattern, through an unsigned view of the same width: numpy fills
    ml_dtypes types (bf16, fp8) element by element, about 15x slower."""
    pattern = np.full(1, dtype.fill_value(), dtype.numpy)
    bits = np.dtype(f"u{pattern.itemsize}")  # every storage dtype is 1, 2, 4 or 8 bytes wide
    data.view(bits)[...] = pattern.view(bits)[0]


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def full_view(buffer: Buffer) -> View:
    return View(buffer, buffer.shape, contiguous_strides(buffer.shape), 0)


def check_initialised(view: View, op: str) -> None:
    """Strict mode: raise if any byte the view reads was never written."""
    if view.storage.written is None:
        return
    mask = view.written_mask()
    if not mask.all():
        missing = int(mask.size - np.count_nonzero(mask))
        raise HazardError(f"reads {missing} of {mask.size} elements of {view.storage!r} that were never "
                          f"written", op=op, hint="initialise the tile first (e.g. nisa.memset)")
