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


class _Boxes(list):
    """Boxes of one allocation with the instruction that last used each: entries [first byte,
    box, end_s, instruction], sorted by first byte.

    Most allocations are used as one whole box: until a second box appears, the list holds at
    most one entry and there is no index. Once a second box arrives, `exact` (box -> entry),
    `starts` (first bytes, for bisection) and `longest` (the widest box) are kept as well.
    A trace makes two of these per allocation: as a list subclass whose `exact` defaults to the
    class's None, one is made without running Python code.
    """

    exact: dict[Box, list] | None = None
    starts: list[int]
    longest: int

    def latest(self, box: Box, ready_s: float, blocker: int) -> tuple[float, int]:
        """(end, instruction) of the last entry overlapping `box` that ends after `ready_s`;
        else (ready_s, blocker) unchanged. The end is compared first: it is the cheaper test."""
        if len(self) == 1:
            item = self[0]
            if item[2] > ready_s and (item[1] == box or overlaps(item[1], box)):
                return item[2], item[3]
            return ready_s, blocker
        stop = bisect_right(self.starts, box[1])
        start = bisect_left(self.starts, box[0] - self.longest, 0, stop)
        for item in self[start:stop]:
            if item[2] > ready_s and overlaps(item[1], box):
                ready_s, blocker = item[2], item[3]
        return ready_s, blocker

    def add(self, box: Box, end_s: float, index: int, keep_later: bool) -> None:
        """Record a use of `box`; a read keeps the later end of two reads of the same box."""
        if not self:
            item = [box[0], box, end_s, index]
            self.append(item)
            if self.exact is not None:  # indexed once, then emptied: keep the index whole
                self.exact[box] = item
                self.starts = [box[0]]
                self.longest = max(self.longest, box[1] - box[0])
            return
        exact = self.exact
        if exact is None:
            item = self[0]
            if item[1] == box:
                if not keep_later or end_s > item[2]:
                    item[2], item[3] = end_s, index
                return
            exact = self.exact = {item[1]: item}  # a second box: index from now on
            self.starts, self.longest = [item[0]], item[1][1] - item[0]
        item = exact.get(box)
        if item is not None:
            if not keep_later or end_s > item[2]:
                item[2], item[3] = end_s, index
            return
        item = exact[box] = [box[0], box, end_s, index]
        position = bisect_right(self.starts, box[0])
        self.starts.insert(position, box[0])
        self.insert(position, item)
        if box[1] - box[0] > self.longest:
            self.longest = box[1] - box[0]

    def drop_covered(self, box: Box) -> None:
        """Forget the boxes a new write covers: waiting on the write implies waiting on them."""
        if len(self) == 1:
            if covers(box, self[0][1]):
                self.clear()
                self.exact = None
            return
        stop = bisect_right(self.starts, box[1])
        start = bisect_left(self.starts, box[0], 0, stop)
        doomed = [k for k in range(start, stop) if covers(box, self[k][1])]
        for k in reversed(doomed):
            del self.exact[self[k][1]]
            del self.starts[k]
            del self[k]


class HazardTracker:
    """Read-after-write, write-after-read and write-after-write waits over a whole trace.

    Each physical core has its own: the two cores of an LNC=2 launch are ordered only where they
    meet (a barrier, a sendrecv), never by where their instructions fell in the trace. (Accesses
    of the two to one HBM tensor with no meeting between are a race, warned after the launch.)"""

    def __init__(self, cores: int):
        # per physical core: allocation -> (writes, reads)
        self.tracks: list[dict[int, tuple[_Boxes, _Boxes]]] = [{} for _ in range(cores)]
        self.regions: dict[tuple, tuple[Box, int]] = {}
        self.shapes: dict[tuple, int] = {}

    def operands(self, ins, core: int) -> tuple[tuple, list[tuple], float, int]:
        """The operands' shapes (ids that ignore addresses, for cost caching), accesses, and
        when every operand is safe to use on physical core `core`, with the instruction that
        decided it (-1: none).

        An access is (writes, reads, box, writing): the two box lists of the operand's
        allocation (allocation ids are unique within a run) and the box it touches. A read waits
        for earlier writes of its bytes; a write for earlier writes and reads.
        """
        known, tracks = self.regions, self.tracks[core]
        shapes, found, ready_s, blocker = [len(ins.inputs)], [], 0.0, -1
        # Two plain loops, not one over inputs + outputs, and the inputs' one-box case of
        # `latest` written out: this is the scheduler's hot path.
        for region in ins.inputs:
            box, shape = known.get(region[2:]) or self._learn(region)
            writes, reads = tracks.get(region.buffer) or _track(tracks, region.buffer)
            shapes.append(shape)
            found.append((writes, reads, box, False))
            if writes:
                if len(writes) == 1:
                    item = writes[0]
                    if item[2] > ready_s and (item[1] == box or overlaps(item[1], box)):
                        ready_s, blocker = item[2], item[3]
                else:
                    ready_s, blocker = writes.latest(box, ready_s, blocker)
        for region in ins.outputs:
            box, shape = known.get(region[2:]) or self._learn(region)
            writes, reads = tracks.get(region.buffer) or _track(tracks, region.buffer)
            shapes.append(shape)
            found.append((writes, reads, box, True))
            if writes:
                ready_s, blocker = writes.latest(box, ready_s, blocker)
            if reads:
                ready_s, blocker = reads.latest(box, ready_s, blocker)
        return tuple(shapes), found, ready_s, blocker

    def _learn(self, region: Region) -> tuple[Box, int]:
        """Box and shape id of an operand seen for the first time."""
        shape = (region.memory, region.partition_count, region.pattern, region.dtype,
                 region.dtype_bytes)
        info = self.regions[region[2:]] = (
            region_box(region), self.shapes.setdefault(shape, len(self.shapes)))
        return info


    @staticmethod
    def record(accesses: list[tuple], end_s: float, index: int) -> None:
        """Remember that instruction `index`, ending at `end_s`, made these accesses."""
        # `add`'s common cases written out (the first use of a box, a box read again): this
        # runs for every operand.
        for writes, reads, box, writing in accesses:
            if not writing:
                exact = reads.exact
                if exact is None:  # unindexed: at most one entry
                    if not reads:
                        reads.append([box[0], box, end_s, index])
                        continue
                    item = reads[0] if reads[0][1] == box else None
                else:
                    item = exact.get(box)
                if item is None:
                    reads.add(box, end_s, index, True)
                elif end_s > item[2]:  # a box read before: keep the later end
                    item[2], item[3] = end_s, index
                continue
            if reads:
                reads.drop_covered(box)
            if writes:
                if len(writes) == 1 and writes[0][1] == box:  # the same tile again (accumulation)
                    writes[0][2], writes[0][3] = end_s, index
                    continue
                writes.drop_covered(box)
            elif writes.exact is None:  # the allocation's first write
                writes.append([box[0], box, end_s, index])
                continue
            writes.add(box, end_s, index, False)


def _track(tracks: dict, buffer: int) -> tuple[_Boxes, _Boxes]:
    track = tracks[buffer] = (_Boxes(), _Boxes())
    return track
