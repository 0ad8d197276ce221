"""`Tile`: an old-API tensor (kernel argument, `nl.ndarray` or a tile a call returned).

A Tile wraps the 0.6 front end's `NkiTensor` view; every instruction is issued on that view, so
values, checks and trace are the 0.6 ones. What the old API adds lives here: indexing with index
expressions (`Indexed`, resolved once the mask is known), block dims before `nl.par_dim`,
operators (`a + b`, `psum += matmul`) and matmul results that accumulate into the PSUM tile
they are added to (`Tile.pending`).
"""

from __future__ import annotations

import numbers

import numpy as np

from trnsim.core.isa import Memory
from trnsim.errors import ArgumentError, HazardError, ShapeError, SourceLoc, UnsupportedError
from trnsim.nki.legacy.index import IndexExpr, index_shape, key_arrays
from trnsim.nki.tensor import NkiTensor

_INDEX_OPS = {"add": "add", "subtract": "sub", "multiply": "mul"}


def _runtime_value(tile) -> int:
    """The one integer a [1, 1] tile holds, read when the kernel reaches it (a dynamic offset, as
    the hardware reads a register); a run without values cannot know it."""
    view = tile.resolve() if isinstance(tile, Indexed) else tile.base
    if view.size != 1:
        raise ShapeError(f"a tile of shape {list(view.shape)} used in an index expression; only a single "
                         f"value (a [1, 1] tile) can offset an index")
    value = np.asarray(view.array()).reshape(-1)[0]
    if not np.isfinite(value):
        raise HazardError(f"a tile used as an index offset holds {value}, not an integer")
    return int(value)


class _Operators:
    """`a + b`, `a < b`, `a += b` ... on tiles and indexed tiles: the old nl calls."""

    __slots__ = ()
    __array_priority__ = 100  # numpy arrays and scalars on the left defer to these operators

    def _op(name: str, reverse: bool = False):  # noqa: N805 - a factory used in the class body
        def method(self, other):
            from trnsim.nki.legacy import language
            if isinstance(other, IndexExpr) and name in _INDEX_OPS:  # `offsets[0, i] + i_f`: an index moved
                operator = f"__{'r' if reverse else ''}{_INDEX_OPS[name]}__"
                return getattr(IndexExpr(_runtime_value(self)), operator)(other)
            function = getattr(language, name)
            return function(other, self) if reverse else function(self, other)
        return method

    __add__, __radd__ = _op("add"), _op("add", True)
    __sub__, __rsub__ = _op("subtract"), _op("subtract", True)
    __mul__, __rmul__ = _op("multiply"), _op("multiply", True)
    __truediv__, __rtruediv__ = _op("divide"), _op("divide", True)
    __pow__, __rpow__ = _op("power"), _op("power", True)
    __mod__, __rmod__ = _op("mod"), _op("mod", True)
    __lt__, __le__ = _op("less"), _op("less_equal")
    __gt__, __ge__ = _op("greater"), _op("greater_equal")
    __eq__, __ne__ = _op("equal"), _op("not_equal")
    __hash__ = object.__hash__  # `==` gives a tile; tiles stay usable as dict keys by identity
    __and__, __rand__ = _op("bitwise_and"), _op("bitwise_and", True)
    __or__, __ror__ = _op("bitwise_or"), _op("bitwise_or", True)
    __xor__, __rxor__ = _op("bitwise_xor"), _op("bitwise_xor", True)
    __lshift__, __rlshift__ = _op("left_shift"), _op("left_shift", True)
    __rshift__, __rrshift__ = _op("right_shift"), _op("right_shift", True)

    def __bool__(self):
        """`if tile > x:`: a tile's values are not known while the kernel is traced. An HBM tensor
        is true, as any Python object: `if bias:` asks whether an optional kernel argument was given
        (the SDK's test_nki_isa_tensor_scalar_cumulative.py writes `nl.load(imm1) if imm1 else None`)."""
        if isinstance(self, Tile) and self.pending is None and self.base.storage.memory is Memory.HBM:
            return True
        raise ArgumentError("a tile has no truth value while the kernel is traced (`if`, `and`, `or`, `not` "
                            "on a tile)", where=SourceLoc.of_caller(),
                            hint="select values with nl.where or mask= with index expressions; "
                                 "combine tiles with & | ~")

    def __floordiv__(self, other):
        """`a // b`: the old API has no floor division operator; refused at the kernel's line."""
        raise UnsupportedError("`//` on a tile is not emulated (the old API documents no floor division "
                               "operator)", what="tile //", where=SourceLoc.of_caller(),
                               hint="use nl.floor(nl.divide(a, b))")

    __rfloordiv__ = __floordiv__

    def __neg__(self):
        from trnsim.nki.legacy import language
        return language.negative(self)

    def __abs__(self):
        from trnsim.nki.legacy import language
        return language.abs(self)

    def __invert__(self):
        """`~mask`: logical not of a comparison's bool_ tile, bitwise not of an integer one."""
        from trnsim.nki.legacy import language
        return (language.logical_not if self.dtype == "bool_" else language.invert)(self)

    def _in_place(name: str):  # noqa: N805
        def method(self, other):
            """In place; for an indexed tile the `t[...] = self` Python does next is a no-op."""
            from trnsim.nki.legacy import language
            language.update(self, name, other)
            return self
        return method

    __iadd__, __isub__ = _in_place("add"), _in_place("subtract")
    __imul__, __itruediv__ = _in_place("multiply"), _in_place("divide")
    del _op, _in_place


class Tile(_Operators):
    """An HBM tensor or on-chip tile of the old API (partition dim first)."""

    __slots__ = ("_base", "pending", "written")

    def __init__(self, base: NkiTensor | None, pending=None):
        self._base, self.pending = base, pending
        self.written = None  # a masked call's result: the rectangle it wrote (None: all of it)

    @property
    def base(self) -> NkiTensor:
        """The view the instructions use (a pending matmul is computed into its own tile first)."""
        if self.pending is not None:
            self._base, self.pending = self.pending.materialize(), None
        return self._base

    shape = property(lambda self: (self.pending or self._base).shape)
    dtype = property(lambda self: (self.pending or self._base).dtype)
    buffer = property(lambda self: self.base.buffer)
    name = property(lambda self: self.base.name)
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: self.base.size)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tile({self._base!r})"

    def __getattr__(self, name: str):
        """View methods of NkiTensor (view, reshape, ...), returning Tiles."""
        try:
            method = getattr(self.base, name)
        except AttributeError:  # kept an AttributeError: hasattr() and getattr(t, name, default) ask
            raise AttributeError(f"{SourceLoc.of_caller()}: an old-API tile has no attribute {name!r} "
                                 f"(it has shape, dtype, ndim, reshape, view, broadcast_to, expand_dims; "
                                 f"nl.transpose transposes)") from None
        if not callable(method):
            return method
        return lambda *args, **kwargs: wrap(method(*args, **kwargs))

    # --- indexing ---------------------------------------------------------------------------
    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if all(type(k) is slice or type(k) is int for k in keys) and not _past_the_end(keys, self.shape):
            base = _widened(self.base, len(keys))  # plain ints and slices: the common case, kept fast
            return Tile(base[keys] if keys else base)
        keys = tuple(_runtime_value(k) if isinstance(k, Tile | Indexed) and np.prod(k.shape) == 1 else k
                     for k in keys)  # a one-value tile as an index: its value, read now
        if any(isinstance(k, IndexExpr | Tile | Indexed) for k in keys) or _past_the_end(keys, self.shape):
            return Indexed(self, keys)  # resolved once the call's mask is known
        base = _widened(self.base, len(keys))
        return Tile(base[keys] if keys else base)

    def __setitem__(self, key, value) -> None:
        from trnsim.nki.legacy import language
        language.assign(self[key], value)
        self.written = None  # written beyond a masked call's rectangle now: copied whole from here on


class Indexed(_Operators):
    """`tile[i_p, i_f]` with index expressions: becomes a view once the call's mask is known."""

    __slots__ = ("tile", "keys")

    def __init__(self, tile: Tile, keys: tuple):
        self.tile, self.keys = tile, keys

    @property
    def shape(self) -> tuple[int, ...]:
        base, keys = _selected(_widened(self.tile.base, len(self.keys)), self.keys)
        if keys and isinstance(keys[0], Tile | Indexed):  # one row per index: as a [rows, 1] expression
            keys = (IndexExpr(np.zeros((keys[0].shape[0], 1), np.int64)), *keys[1:])
        return index_shape(key_arrays(keys, base.shape))

    dtype = property(lambda self: self.tile.dtype)
    buffer = property(lambda self: self.tile.buffer)

    def resolve(self, box: tuple[slice, ...] | None = None) -> NkiTensor | None:
        """The view of the iterations in `box` (all without one); None when the box is empty."""
        base, keys = _selected(_widened(self.tile.base, len(self.keys)), self.keys)
        if keys and isinstance(keys[0], Tile | Indexed):
            return _indirect_rows(base, keys, box)
        return affine_view(base, key_arrays(keys, base.shape), box)

    def __getattr__(self, name: str):
        return getattr(Tile(self.resolve()), name)

    def __setitem__(self, key, value):
        raise ShapeError("an indexed tile cannot be indexed again", hint="index the tile once")


def _past_the_end(keys: tuple, shape: tuple) -> bool:
    """A slice reaching past its dim (`t[256:384]` of 288 rows): legal under a mask that cuts it."""
    for k, n in zip(keys, shape, strict=False):
        if type(k) is slice and k.stop is not None and isinstance(k.stop, numbers.Integral) and k.stop > n:
            return True
    return False


def _selected(base: NkiTensor, keys: tuple) -> tuple[NkiTensor, tuple]:
    """`hbm[b, idx_tile, i_f]`: leading integer keys of an HBM tensor before an index tile select
    (the dims go, as HBM integer indexing does), so the index tile addresses the next dim."""
    if base.storage.memory is not Memory.HBM or not any(isinstance(k, Tile | Indexed) for k in keys):
        return base, keys
    while keys and isinstance(keys[0], numbers.Integral):
        base, keys = base[int(keys[0])], keys[1:]
    return base, keys


def _widened(base: NkiTensor, rank: int) -> NkiTensor:
    """An on-chip tile indexed with more keys than it has dims: a [P] tile is the [P, 1] column."""
    while base.ndim < rank and base.storage.memory is not Memory.HBM:
        base = base.expand_dim(base.ndim)
    return base


class BlockTile:
    """`nl.ndarray((n, nl.par_dim(128), 512))`: n tiles the old compiler allocated one by one (each
    lives as long as it is used), so a block tensor larger than SBUF or PSUM is fine when its blocks
    are not all in use at once. Integer keys on the block dims pick a tile, allocated on first use."""

    __slots__ = ("blocks", "tile_shape", "dtype", "buffer", "make", "chosen", "made")

    def __init__(self, blocks: tuple[int, ...], tile_shape: tuple[int, ...], dtype: str, buffer, make,
                 chosen=(), made=None):
        self.blocks, self.tile_shape, self.dtype, self.buffer = blocks, tile_shape, dtype, buffer
        self.make, self.chosen = make, chosen
        self.made = {} if made is None else made

    @property
    def shape(self) -> tuple[int, ...]:
        return self.blocks[len(self.chosen):] + self.tile_shape

    def block(self, index: tuple[int, ...]) -> Tile:
        if index not in self.made:
            self.made[index] = self.make()
        return self.made[index]

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        chosen, free = list(self.chosen), len(self.blocks) - len(self.chosen)
        while free and keys and isinstance(keys[0], numbers.Integral):
            size = self.blocks[len(chosen)]
            if not -size <= keys[0] < size:
                raise HazardError(f"block index {keys[0]} is out of bounds for a block dim of size {size}")
            chosen.append(int(keys[0]) % size)
            keys, free = keys[1:], free - 1
        if free and keys and not all(isinstance(k, slice) and k == slice(None) for k in keys):
            raise UnsupportedError("indexing block dims (before nl.par_dim) with anything but integers is "
                                   "not emulated", what="block-dim index", where=SourceLoc.of_caller(),
                                   hint="use integer block indices")
        if free:
            return BlockTile(self.blocks, self.tile_shape, self.dtype, self.buffer, self.make, tuple(chosen),
                             self.made)
        tile = self.block(tuple(chosen))
        return tile[keys] if keys else tile

    def __setitem__(self, key, value) -> None:
        from trnsim.nki.legacy import language
        language.assign(self[key], value)

    def __getattr__(self, name: str):
        raise UnsupportedError(f"a block tensor (dims before nl.par_dim) used whole ({name}) is not emulated",
                               what="whole block tensor", where=SourceLoc.of_caller(),
                               hint="index its block dims with integers")


def _indirect_rows(base: NkiTensor, keys: tuple, box) -> NkiTensor:
    """`hbm[idx_tile, i_f]`: row p of the access is row idx_tile[p] of dim 0 (a DMA gather or
    scatter, bounds checked when it runs)."""
    index = keys[0].resolve() if isinstance(keys[0], Indexed) else keys[0].base
    if any(isinstance(k, Tile | Indexed) for k in keys[1:]) or base.storage.memory is not Memory.HBM:
        raise UnsupportedError("indirect indexing other than an HBM tensor's first dim by a [P, 1] index "
                               "tile is not emulated", what="indirect index")
    rows = np.zeros((index.shape[0], 1), np.int64)
    if box is not None:
        index = index[box[0]]
        rows = rows[box[0]]
    direct = affine_view(base, key_arrays((IndexExpr(rows), *keys[1:]), base.shape),
                         None if box is None else (slice(None), *box[1:]))
    pattern = [[s, n] for s, n in zip(direct.strides, direct.shape, strict=True)]
    return base.ap(pattern, direct.offset - base.offset, vector_offset=index, indirect_dim=0)


def affine_view(base: NkiTensor, arrays: list[np.ndarray], box) -> NkiTensor | None:
    """The strided view of `base` that the per-dim index arrays describe, in the `box` of iterations."""
    shape = index_shape(arrays)
    rank = len(shape)
    arrays = [np.reshape(a, (1,) * (rank - np.ndim(a)) + np.shape(a)) for a in arrays]
    if box is not None:
        if len(box) != rank:
            raise ShapeError(f"mask over {len(box)} axes for an access of {rank} axes {list(shape)}")
        arrays = [a[tuple(b if n > 1 else slice(None) for b, n in zip(box, a.shape, strict=True))]
                  for a in arrays]
        shape = tuple(len(range(*b.indices(n))) for b, n in zip(box, shape, strict=True))
        if 0 in shape:
            return None
    offset, strides = 0, [0] * rank
    for dim, (values, size, stride) in enumerate(zip(arrays, base.shape, base.strides, strict=False)):
        _check_bounds(base, dim, values, size)
        steps = affine_steps(values, f"the index of dim {dim} of {base.name!r}")
        offset += stride * int(values.flat[0])
        strides = [total + stride * step for total, step in zip(strides, steps, strict=True)]
    return base.ap([[s, n] for s, n in zip(strides, shape, strict=True)], offset)


def _check_bounds(base: NkiTensor, dim: int, values: np.ndarray, size: int) -> None:
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= size:
        raise HazardError(f"index {low if low < 0 else high} is out of bounds for dim {dim} of "
                          f"{base.name!r} (size {size})", hint="keep indices inside the tensor, or mask them")


def affine_steps(values: np.ndarray, what: str) -> list[int]:
    """The step per iteration axis of an index array; refused unless it is affine."""
    first = values.flat[0]
    steps = [int(values[tuple(1 if a == axis else 0 for a in range(values.ndim))] - first)
             if values.shape[axis] > 1 else 0 for axis in range(values.ndim)]
    expected = first + sum(step * np.arange(n).reshape([-1 if a == axis else 1 for a in range(values.ndim)])
                           for axis, (step, n) in enumerate(zip(steps, values.shape, strict=True)))
    if not np.array_equal(values, np.broadcast_to(expected, values.shape)):
        raise UnsupportedError(f"{what} is not affine in the iteration "
                               f"(e.g. uses // or %); no access pattern describes it",
                               what="non-affine index")
    return steps


def wrap(value):
    """NkiTensors (and tuples of them) as Tiles; anything else unchanged."""
    if isinstance(value, NkiTensor):
        return Tile(value)
    if isinstance(value, tuple):
        return tuple(wrap(v) for v in value)
    return value


def unwrap(value):
    """Tiles (in tuples, lists, dicts) as the NkiTensors under them: a kernel's results."""
    if isinstance(value, Tile):
        return value.base
    if isinstance(value, tuple | list):
        return type(value)(unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    return value


def on_chip(tile) -> bool:
    return tile.base.storage.memory is not Memory.HBM
