"""How an old-API call turns its arguments into the views the 0.6 instructions take.

Every compute call of the old API has an iteration space (its output shape) and an optional
`mask=`. `Call` works out the space from the operands, cuts the mask's rectangle out of every
operand and of the destination, and allocates the result tile the old compiler would have.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from trnsim.core.isa import Memory
from trnsim.core.memory import DType
from trnsim.errors import ArgumentError, ShapeError
from trnsim.nki import backend, calls, dtypes
from trnsim.nki import isa as nisa06
from trnsim.nki.legacy.index import mask_box, par_dim, partition_axis
from trnsim.nki.legacy.tile import BlockTile, Indexed, Tile
from trnsim.nki.tensor import NkiTensor


def is_tile(value) -> bool:
    return isinstance(value, Tile | Indexed | NkiTensor)


ARGUMENTS = {name: (is_tile, "a tile") for name in (
    "src", "dst", "a", "data", "data0", "data1", "data2", "stationary", "moving", "on_true_tile", "vals",
    "dst_idx", "src_buffer", "segment_ids")} | {
    "name": calls.NAME, "dtype": calls.DTYPE, "buffer": calls.BUFFER, "keepdims": calls.BOOL,
    "transpose_x": calls.BOOL, "engine": calls.ENGINE, "reduce_cmd": calls.REDUCE_CMD, "axis": calls.AXES,
    "axes": calls.AXES, "perf_mode": (calls.is_option, "a nisa.matmul_perf_mode member"),
    "shape": (lambda value: isinstance(value, tuple | list | Integral), "a shape (a tuple of sizes)")}
"""What the old API's arguments of these names are, in every call that has them (numbers go where
`x`, `y` and `value` go, so those are left to the calls)."""
HELPERS = ("trnsim.nki.legacy.operands", "trnsim.nki.legacy.tile")
"""Modules whose functions the old `nl` / `nisa` modules import for their own use (not API calls)."""


def shape_of(value) -> tuple[int, ...]:
    return tuple(value.shape) if is_tile(value) else ()


class Call:
    """One call's iteration space: `shape`, the mask's `box` (None: everything runs) and `empty`
    (the mask keeps no iteration, so nothing is issued)."""

    def __init__(self, operands, mask, shape=None):
        shapes = [shape_of(x) for x in operands if is_tile(x)]
        if shape is None:
            rank = max(map(len, shapes), default=0)
            try:  # dims align from the partition dim: a [P] tile is the [P, 1] column
                shape = tuple(np.broadcast_shapes(*(s + (1,) * (rank - len(s)) for s in shapes)))
            except ValueError:
                raise ShapeError(f"operand shapes {[list(s) for s in shapes]} do not broadcast") from None
        self.shape = tuple(shape)
        self.box = mask_box(mask, self.shape)
        self.empty = self.box is not None and any(b.start == b.stop for b in self.box)

    def view(self, value, broadcast: bool = True):
        """An operand as a view over this call's iterations (numbers pass through)."""
        if isinstance(value, Indexed):
            rank = len(value.shape)
            if rank == len(self.shape) or self.box is None:
                return _padded(value.resolve(self.box), len(self.shape))
            return _padded(value.resolve(self.box[:rank]), len(self.shape))
        if isinstance(value, Tile):
            value = value.base
        if not isinstance(value, NkiTensor):
            return value
        value = _padded(value, len(self.shape))
        if broadcast and value.shape != self.shape and len(value.shape) == len(self.shape):
            value = value.broadcast_to(self.shape)
        if self.box is None:
            return value
        return value[tuple(b if n > 1 else slice(None) for b, n in zip(self.box, value.shape, strict=True))]

    def operand(self, value):
        """A compute instruction's operand: its `view`, with a partition broadcast (a [1, F] tile
        read on P partitions) first copied into a tile of its own, as the old compiler did: an
        engine reads each partition through its own lane, so the compiler made the broadcast
        (on the Tensor Engine, which trnsim.timing charges it to, as for the 0.6 API's
        `nl.broadcast_to`). The copy is exact, so values do not change."""
        view = self.view(value)
        if (not isinstance(view, NkiTensor) or view.storage.memory is Memory.HBM or view.ndim < 2
                or view.shape[0] == 1 or view.strides[0] != 0):
            return view
        staged = backend.new_tensor(view.shape, view.dtype, dtypes.SBUF)
        nisa06.tensor_copy(dst=staged, src=view)
        return staged

    def source(self, value):
        """The value a copy writes: broadcast to the call's shape, or, holding as many elements in
        another shape, as it is (a [128, 256] tile stored into a [128, 4, 16, 4] tensor)."""
        if self.box is None and is_tile(value) and math.prod(value.shape) == math.prod(self.shape):
            return value.resolve() if isinstance(value, Indexed) else getattr(value, "base", value)
        return self.view(value)

    def column(self, value):
        """A [P, 1] operand kept as a column (a per-partition scalar), cut to the box's rows."""
        return self.view(value, broadcast=False)

    def output(self, dtype, buffer=None, shape=None) -> tuple[Tile, NkiTensor]:
        """A new result tile and the part of it this call writes."""
        tile = new_tile(self.shape if shape is None else shape, dtype, buffer)
        if shape is None:
            tile.written = self.box
        return tile, self.view(tile, broadcast=False)


def in_sbuf(view):
    """A PSUM view copied to a new SBUF tile (the copy the old compiler inserted before an
    instruction that cannot read PSUM); any other operand unchanged."""
    if not isinstance(view, NkiTensor) or view.storage.memory is not Memory.PSUM:
        return view
    staged = backend.new_tensor(view.shape, view.dtype, dtypes.SBUF)
    nisa06.tensor_copy(dst=staged, src=view, engine=nisa06.engine.vector)
    return staged


def _padded(view, rank: int):
    """A view of lower rank with size-1 dims appended (partition-first alignment)."""
    while view is not None and view.ndim < rank:
        view = view.expand_dim(view.ndim)
    return view


class PendingMatmul:
    """A matmul not issued yet: its PSUM destination is chosen by how the result is used."""

    def __init__(self, stationary, moving, params: dict):
        self.stationary, self.moving, self.params = stationary, moving, params
        double_row = params.get("perf_mode") == "double_row" and len(moving.shape) == 3  # K as [P, 2]
        self.shape = (stationary.shape[-1], moving.shape[-1] if double_row else math.prod(moving.shape[1:]))
        self.dtype = "float32"

    def issue(self, dst, accumulate) -> None:
        stationary, moving = in_sbuf(self.stationary), in_sbuf(self.moving)
        nisa06.nc_matmul(dst, stationary, moving, accumulate=accumulate, **self.params)
        note_values(dst)

    def materialize(self):
        tile = new_tile(self.shape, self.dtype, dtypes.PSUM)
        self.issue(tile.base, accumulate=None)
        return tile.base

    @staticmethod
    def fits(dst) -> bool:
        return dst.storage.memory is Memory.PSUM


class PendingReduce:
    """`dst[...] = nl.loop_reduce(x, op, ...)`: dst = op(dst, x) once the destination is known
    (the old API's reduction across loop iterations into the tile it is assigned to)."""

    def __init__(self, data, op, dtype):
        self.data, self.op = data, op
        self.shape, self.dtype = tuple(data.shape), dtype or data.dtype

    def issue(self, dst, accumulate) -> None:
        note_values(dst)
        nisa06.tensor_tensor(dst=dst, data1=dst, data2=in_sbuf(self.data), op=self.op)

    def materialize(self):
        tile = new_tile(self.shape, self.dtype)
        nisa06.tensor_copy(dst=tile.base, src=self.data, engine=nisa06.engine.vector)
        return tile.base

    @staticmethod
    def fits(dst) -> bool:
        return dst.storage.memory is not Memory.HBM


# Per PSUM buffer, which elements an instruction the kernel issued wrote (a matmul too), kept on the
# launch (`Launch.written`: True once the whole buffer was written, else a flag per element):
# `psum += matmul` adds (accumulate=True) onto a region that holds values throughout; onto a fresh
# one it starts the matmul group (accumulate=None), as the old compiler did for an accumulation into
# a new PSUM tile. Decided when the kernel issues the instruction, so deferred execution cannot
# change it.


def note_values(view) -> None:
    """`view` (when in PSUM) holds values from now on."""
    if not (is_tile(view) and view.storage.memory is Memory.PSUM):
        return
    written = backend.core().launch.written
    if written.get(view.storage.id) is True:
        return
    storage = view.storage
    if math.prod(view.shape) == math.prod(storage.shape) and view.element.numpy == storage.dtype.numpy:
        written[storage.id] = True  # the usual case: a whole tile, no flags to keep
    else:
        _flags(view, written)[...] = True


def holds_values(view) -> bool:
    """Whether every element of a PSUM view holds a value an issued instruction wrote."""
    written = backend.core().launch.written
    return written.get(view.storage.id) is True or bool(_flags(view, written).all())


def _flags(view, written: dict) -> np.ndarray:
    storage = view.storage
    flags = written.get(storage.id)
    if flags is None:
        flags = written[storage.id] = np.zeros(math.prod(storage.shape), np.bool_)
    if view.element.numpy.itemsize != storage.dtype.numpy.itemsize:
        return flags  # a view in a dtype of another size: tracked for the whole buffer
    return np.ndarray(view.shape, np.bool_, flags, view.offset, tuple(view.strides))


def new_tile(shape, dtype, buffer=None, name: str = "") -> Tile:
    """`nl.ndarray`: block dims before `nl.par_dim` are laid out after the partition dim, as
    the old compiler allocated them, and shown in the order the kernel wrote."""
    shape = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
    if not all(isinstance(size, int | np.integer) for size in shape):
        raise ArgumentError(f"shape {shape!r}: every dim must be an integer")
    buffer = dtypes.SBUF if buffer is None else buffer
    axis = partition_axis(shape) if dtypes.region(buffer).memory is not Memory.HBM else 0
    element = dtypes.dtype(dtype)
    if axis:
        tile_shape = tuple(int(s) for s in shape[axis:])
        return BlockTile(tuple(int(s) for s in shape[:axis]), tile_shape, element.name, buffer,
                         lambda: Tile(backend.new_tensor(tile_shape, element, buffer, name)))
    return Tile(backend.new_tensor(tuple(int(s) for s in shape), element, buffer, name))


def result_dtype(dtype, *operands) -> str:
    """The dtype a call returns: `dtype=` if given, else its operands' promoted dtype by the old
    API's rules (SDK 2.26 nki/api/nki.api.shared.rst, "NKI Type Promotion" and "Weakly Typed Scalar
    Type Inference"): a Python number counts as uint8 (bool), int32 (int) or float32 (float), a
    numpy scalar as its own dtype."""
    if dtype is not None:
        return dtypes.dtype(dtype).name
    kinds = [kind for kind in map(_operand_dtype, operands) if kind is not None]
    if not kinds:
        return "float32"
    result = kinds[0]
    for kind in kinds[1:]:
        result = dtypes.promoted(result, kind)
    return result.name


def _operand_dtype(value) -> DType | None:
    if is_tile(value):
        return dtypes.dtype(value.dtype)
    if isinstance(value, np.generic) and value.dtype.itemsize < 8:
        return dtypes.dtype(value.dtype)
    if isinstance(value, bool):  # numpy scalars below 8 bytes, np.bool_ too, keep their dtype above
        return dtypes.dtype("uint8")
    if isinstance(value, int | np.integer):
        return dtypes.dtype("int32")
    if isinstance(value, float | np.floating):
        return dtypes.dtype("float32")
    return None


__all__ = ["Call", "new_tile", "par_dim", "result_dtype", "is_tile"]
