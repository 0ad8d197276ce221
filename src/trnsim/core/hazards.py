"""Which earlier instructions an access must wait for: last writers and readers per allocation.

An operand touches a box of its allocation: on chip, partitions x a byte range inside each
partition; in HBM, rows x a byte range inside each row when the access pattern is a clean 2-D
window (a tile of a row-major tensor), else one flat byte range. Two boxes of one allocation
overlap when their flat byte ranges meet and, if both use the same row pitch, their rows and
columns meet (so neighbouring column tiles of one HBM tensor stay independent).

Per allocation, writes and reads live in two lists sorted by first byte, searched by bisection;
a write drops the earlier boxes it covers, so a tile used over and over keeps its lists short.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import attrgetter

from trnsim.core.isa import Memory
from trnsim.core.trace import Region

# A box: (first flat byte, last flat byte, a0, a1, b0, b1, pitch). On chip a = partitions and
# pitch = 0; in HBM a = rows of `pitch` bytes (or (0, 1) and pitch = 0 for a flat range).
Box = tuple[int, int, int, int, int, int, int]


def region_box(region: Region) -> Box:
    """The box one operand touches inside its allocation."""
    low, high = region.byte_span()
    if region.memory is not Memory.HBM:
        p0 = region.partition_start
        return low, high, p0, p0 + region.partition_count, low, high, 0
    dims = [(stride, count) for stride, count in region.pattern if count > 1]
    if len(dims) >= 2 and dims[0][0] > 0:
        (pitch, rows), inner = dims[0], dims[1:]
        first = min(0, *(s * (c - 1) for s, c in inner))
        last = max(0, *(s * (c - 1) for s, c in inner))
        column = region.offset % pitch
        if first >= -column and column + last < pitch:
            size = region.dtype_bytes
            row = region.offset // pitch
            b0, b1 = int((column + first) * size), int((column + last + 1) * size) - 1
            return low, high, row, row + rows, b0, b1, int(pitch * size)
    return low, high, 0, 1, low, high, 0


def overlaps(x: Box, y: Box) -> bool:
    if x[0] > y[1] or y[0] > x[1]:
        return False
    if x[6] != y[6]:
        return True  # different layouts: the flat ranges meet, so assume they share bytes
    return x[2] < y[3] and y[2] < x[3] and x[4] <= y[5] and y[4] <= x[5]


def covers(x: Box, y: Box) -> bool:
    return x[6] == y[6] and x[2] <= y[2] and y[3] <= x[3] and x[4] <= y[4] and y[5] <= x[5]


def _touch(item: list, end_s: float, index: int, keep_later: bool) -> None:
    """A new use of an entry's box: a write replaces the last one, a read keeps the later."""
    if not keep_later or end_s > item[2]:
        item[2], item[3] = end_s, index


class _Boxes:
    """Boxes of one allocation with the instruction that last used each: sorted by first byte.

    Most allocations are used as one whole box: until a second box appears, `items` holds one
    entry and there is no index; `exact` (box -> entry) is built when a second box arrives.
    """

    __slots__ = ("starts", "items", "exact", "longest")

    def __init__(self):
        self.starts: list[int] = []
        self.items: list[list] = []  # [first byte, box, end_s, instruction]
        self.exact: dict[Box, list] | None = None
        self.longest = 0

    def meeting(self, box: Box) -> list[list]:
        """The entries whose boxes overlap `box`."""
        items = self.items
        if len(items) == 1:
            return items if overlaps(items[0][1], box) else []
        stop = bisect_right(self.starts, box[1])
        start = bisect_left(self.starts, box[0] - self.longest, 0, stop)
        return [item for item in items[start:stop] if overlaps(item[1], box)]

    def add(self, box: Box, end_s: float, index: int, keep_later: bool) -> None:
        """Record a use of `box`; a read keeps the later end of two reads of the same box."""
        items = self.items
        if not items:
            self.items, self.starts = [[box[0], box, end_s, index]], [box[0]]
            self.longest = max(self.longest, box[1] - box[0])
            return
        if self.exact is None:
            if items[0][1] == box and len(items) == 1:
                _touch(items[0], end_s, index, keep_later)
                return
            self.exact = {item[1]: item for item in items}
        item = self.exact.get(box)
        if item is not None:
            _touch(item, end_s, index, keep_later)
            return
        item = [box[0], box, end_s, index]
        position = bisect_right(self.starts, box[0])
        self.starts.insert(position, box[0])
        items.insert(position, item)
        self.exact[box] = item
        self.longest = max(self.longest, box[1] - box[0])

    def drop_covered(self, box: Box) -> None:
        """Forget the boxes a new write covers: waiting on the write implies waiting on them."""
        items = self.items
        if len(items) == 1:
            if covers(box, items[0][1]):
                self.items, self.starts, self.exact = [], [], None
            return
        stop = bisect_right(self.starts, box[1])
        start = bisect_left(self.starts, box[0], 0, stop)
        doomed = [k for k in range(start, stop) if covers(box, items[k][1])]
        for k in reversed(doomed):
            if self.exact is not None:
                del self.exact[items[k][1]]
            del self.starts[k]
            del items[k]


_REGION_KEY = attrgetter("address_bytes", "offset", "pattern", "dtype_bytes", "partition_start",
                         "partition_count", "dtype", "memory")
"""Everything an operand's box and shape depend on, fetched in one call (it is the hot path)."""


class HazardTracker:
    """Read-after-write, write-after-read and write-after-write waits over a whole trace."""

    def __init__(self):
        self.tracks: dict[int, tuple[_Boxes, _Boxes]] = {}  # allocation -> (writes, reads)
        self.regions: dict[tuple, tuple[Box, int]] = {}
        self.shapes: dict[tuple, int] = {}

    def operands(self, ins) -> tuple[tuple, list[tuple]]:
        """The operands' shapes (ids that ignore addresses, for cost caching) and accesses.

        An access is (writes, reads, box, writing): the two box lists of the operand's
        allocation (allocation ids are unique within a run) and the box it touches.
        """
        known, tracks = self.regions, self.tracks
        shapes, found = [len(ins.inputs)], []
        # Two plain loops, not one over inputs + outputs: this is the scheduler's hot path.
        for region in ins.inputs:
            box, shape = known.get(_REGION_KEY(region)) or self._learn(region)
            writes, reads = tracks.get(region.buffer) or self._track(region.buffer)
            shapes.append(shape)
            found.append((writes, reads, box, False))
        for region in ins.outputs:
            box, shape = known.get(_REGION_KEY(region)) or self._learn(region)
            writes, reads = tracks.get(region.buffer) or self._track(region.buffer)
            shapes.append(shape)
            found.append((writes, reads, box, True))
        return tuple(shapes), found

    def _learn(self, region: Region) -> tuple[Box, int]:
        """Box and shape id of an operand seen for the first time."""
        shape = (region.memory, region.partition_count, region.pattern, region.dtype,
                 region.dtype_bytes)
        info = self.regions[_REGION_KEY(region)] = (
            region_box(region), self.shapes.setdefault(shape, len(self.shapes)))
        return info

    def _track(self, buffer: int) -> tuple[_Boxes, _Boxes]:
        track = self.tracks[buffer] = (_Boxes(), _Boxes())
        return track

    @staticmethod
    def ready(accesses: list[tuple]) -> tuple[float, int]:
        """When every operand is safe to use, and the instruction that decided it (-1: none)."""
        ready, blocker = 0.0, -1
        for writes, reads, box, writing in accesses:
            if writes.items:
                for item in writes.meeting(box):
                    if item[2] > ready:
                        ready, blocker = item[2], item[3]
            if writing and reads.items:
                for item in reads.meeting(box):
                    if item[2] > ready:
                        ready, blocker = item[2], item[3]
        return ready, blocker

    @staticmethod
    def record(accesses: list[tuple], end_s: float, index: int) -> None:
        """Remember that instruction `index`, ending at `end_s`, made these accesses."""
        for writes, reads, box, writing in accesses:
            if not writing:
                reads.add(box, end_s, index, keep_later=True)
                continue
            if reads.items:
                reads.drop_covered(box)
            items = writes.items
            if len(items) == 1 and items[0][1] == box:  # the same tile again (accumulation)
                items[0][2], items[0][3] = end_s, index
                continue
            if items:
                writes.drop_covered(box)
            writes.add(box, end_s, index, keep_later=False)
