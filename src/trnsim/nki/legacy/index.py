"""Index expressions of the old API: `nl.arange`, `nl.mgrid`, `nl.par_dim` and `mask=` predicates.

An `IndexExpr` is a small integer numpy array that broadcasts like numpy (`nl.arange(128)[:, None]`
is a [128, 1] column). Indexing a tensor with them (`t[i_p, i_f]`) must give an affine access
pattern, which `affine_view` turns into the same strided view the 0.6 front end slices out, so
both front ends issue identical instructions. A `Predicate` is a boolean array over the same
iteration space; `mask_box` reduces it to the rectangle of iterations that run.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from trnsim import config
from trnsim.errors import KernelWarning, ShapeError, SourceLoc, UnsupportedError
from trnsim.nki.tensor import DynSlice


class IndexExpr:
    """Integer indices over the iteration space, built from aranges with + - * // %."""

    __slots__ = ("values",)
    __array_priority__ = 100  # numpy scalars on the left defer to our operators

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.int64)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def __getitem__(self, key) -> IndexExpr:
        return IndexExpr(self.values[key])

    def __repr__(self) -> str:
        return f"IndexExpr(shape={list(self.shape)}, {int(self.values.min())}..{int(self.values.max())})"

    def _arith(self, other, op, reverse=False) -> IndexExpr:
        other = _values(other)
        return IndexExpr(op(other, self.values) if reverse else op(self.values, other))

    def __add__(self, other): return self._arith(other, np.add)
    def __radd__(self, other): return self._arith(other, np.add, True)
    def __sub__(self, other): return self._arith(other, np.subtract)
    def __rsub__(self, other): return self._arith(other, np.subtract, True)
    def __mul__(self, other): return self._arith(other, np.multiply)
    def __rmul__(self, other): return self._arith(other, np.multiply, True)
    def __floordiv__(self, other): return self._arith(other, np.floor_divide)
    def __rfloordiv__(self, other): return self._arith(other, np.floor_divide, True)
    def __mod__(self, other): return self._arith(other, np.mod)
    def __neg__(self): return IndexExpr(-self.values)

    def _compare(self, other, op) -> Predicate:
        """A predicate that remembers `self - other` and the comparison (`nisa.affine_select`)."""
        difference = np.subtract(self.values, _values(other))
        return Predicate(op(self.values, _values(other)), (difference, op.__name__))

    def __lt__(self, other): return self._compare(other, np.less)
    def __le__(self, other): return self._compare(other, np.less_equal)
    def __gt__(self, other): return self._compare(other, np.greater)
    def __ge__(self, other): return self._compare(other, np.greater_equal)
    def __eq__(self, other): return self._compare(other, np.equal)  # noqa: D105 - a predicate, as NKI's
    def __ne__(self, other): return self._compare(other, np.not_equal)
    __hash__ = None

    def __bool__(self) -> bool:
        return _truth_value(self)


class Predicate:
    """`mask=` value: which iterations run; combine with & | ~."""

    __slots__ = ("values", "comparison")

    def __init__(self, values, comparison=None):
        self.values = np.asarray(values, dtype=bool)
        self.comparison = comparison  # (lhs - rhs values, numpy comparison name) of a single comparison

    def __and__(self, other): return Predicate(self.values & _values(other))
    def __rand__(self, other): return Predicate(_values(other) & self.values)
    def __or__(self, other): return Predicate(self.values | _values(other))
    def __ror__(self, other): return Predicate(_values(other) | self.values)
    def __invert__(self): return Predicate(~self.values)

    def __bool__(self) -> bool:
        return _truth_value(self)

    def __repr__(self) -> str:
        return f"Predicate(shape={list(self.values.shape)}, {int(self.values.sum())} true)"


def _truth_value(value) -> bool:
    """`mask=(a and b)`, `mask=not a`, `if i_p < 64:`: Python asks for one truth value and cannot
    be told otherwise. trnsim answers True, as Python does for any object: `a and b` masks with `b`
    alone and `not a` is False. The SDK's own test_nki_isa_nc_match_replace8.py writes such a mask
    (its check passes read either way), so it is not refused; it warns (strict mode: refuses), since
    the SDK documents `&` for combining masks (nki.api.shared.rst, "NKI API Masking")."""
    what = (f"Python `and` / `or` / `not` / `if` on {type(value).__name__} {list(value.values.shape)} "
            f"is taken as True, as for any Python object: `a and b` is `b`, `not a` is False")
    if config.current().strict:
        raise ShapeError(what, hint="combine masks with & | ~: (i_p < 64) & (i_f < 32), ~(i_p < 64)")
    warnings.warn(f"{SourceLoc.of_caller()}: {what}; combine masks with & | ~", KernelWarning, stacklevel=3)
    return True


def _values(value):
    if isinstance(value, IndexExpr | Predicate):
        return value.values
    if isinstance(value, numbers.Integral | bool | np.bool_):
        return value
    raise ShapeError(f"{value!r} is not an index expression or an integer",
                     hint="index expressions combine nl.arange/nl.mgrid values with integers")


def arange(start, stop=None, step=1) -> IndexExpr:
    """`nl.arange`: a 1-D index expression (use [:, None] / [None, :] to place it on an axis)."""
    bounds = (start, step) if stop is None else (start, stop, step)
    if not all(isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in bounds) or step == 0:
        raise ShapeError(f"nl.arange({start!r}, {stop!r}, {step!r}): start, stop and step are integers, step "
                         f"not 0", hint="nl.arange(128) or nl.arange(0, 512, 2)")
    return IndexExpr(np.arange(start, stop, step) if stop is not None else np.arange(start))


class _Grid(tuple):
    """What `nl.mgrid[...]` returns: unpacks like a tuple and names its axes .p, .x, .y, .z."""

    p = property(lambda self: self[0])
    x = property(lambda self: self[1])
    y = property(lambda self: self[2])
    z = property(lambda self: self[3])


class _MGrid:
    """`nl.mgrid[0:128, 0:512]`: one index expression per axis, each spanning its own axis."""

    def __getitem__(self, key) -> _Grid:
        keys = key if isinstance(key, tuple) else (key,)
        grids = np.mgrid[tuple(_grid_slice(k) for k in keys)]
        rank = len(keys)
        return _Grid(IndexExpr(_spread(axis, grids[axis], rank)) for axis in range(rank))


def _grid_slice(key) -> slice:
    if isinstance(key, DynSlice):
        return slice(key.start, key.start + key.size * key.step, key.step)
    if isinstance(key, slice) and isinstance(key.stop, numbers.Integral):
        return key
    raise ShapeError(f"nl.mgrid[{key!r}]: each axis is a slice with integer bounds")


def _spread(axis: int, grid: np.ndarray, rank: int) -> np.ndarray:
    """The values along `axis` only, as a broadcastable array (size 1 on the other axes)."""
    index = tuple(slice(None) if a == axis else slice(0, 1) for a in range(rank))
    return grid[index]


mgrid = _MGrid()


class par_dim(int):  # noqa: N801 - NKI's name
    """`nl.par_dim(128)` in a tile shape: this dim is the partition dim."""


def partition_axis(shape) -> int:
    """The dim `nl.par_dim` marks in a shape (dim 0 when none does)."""
    marked = [dim for dim, size in enumerate(shape) if isinstance(size, par_dim)]
    if len(marked) > 1:
        raise ShapeError(f"shape {list(shape)} marks {len(marked)} dims with nl.par_dim; a tile has one")
    return marked[0] if marked else 0


def is_index(key) -> bool:
    return isinstance(key, IndexExpr)


def key_arrays(keys: tuple, shape: tuple) -> list[np.ndarray]:
    """One broadcastable integer array per tensor dim: expressions as they are, ints as scalars,
    slices as aranges placed on the axis of their position (as `t[i_p, 0:512]` reads)."""
    if len(keys) > len(shape):
        raise ShapeError(f"{len(keys)} indices for a tensor of {len(shape)} dims {list(shape)}",
                         hint="index each dim once")
    rank = len(keys)
    arrays = []
    for position, (key, size) in enumerate(zip(keys, shape, strict=False)):
        if isinstance(key, IndexExpr):
            arrays.append(key.values)
        elif isinstance(key, numbers.Integral):
            arrays.append(np.int64(key))
        elif isinstance(key, slice | DynSlice):
            values = np.arange(*_bounds(key, size))
            arrays.append(values.reshape([-1 if a == position else 1 for a in range(rank)]))
        else:
            raise ShapeError(f"index {key!r} mixed with index expressions; use ints, slices or nl.arange")
    for size in shape[len(keys):]:  # dims without a key are taken whole, on the next axis
        rank += 1
        arrays.append(np.arange(size).reshape([1] * (rank - 1) + [-1]))
    return arrays


def index_shape(arrays) -> tuple[int, ...]:
    """The iteration space the per-dim index arrays span (they must broadcast, as numpy's)."""
    try:
        return tuple(np.broadcast_shapes(*(np.shape(a) for a in arrays)))
    except ValueError:
        shapes = [list(np.shape(a)) for a in arrays]
        raise ShapeError(f"the indices' shapes {shapes} do not broadcast to one iteration space",
                         hint="give each index expression its own axis, e.g. nl.arange(4)[None, :, None] "
                              "between a [P, 1, 1] and a [1, 1, F] one") from None


def _bounds(key, size: int) -> tuple[int, int, int]:
    """start, stop, step of a slice as written: a stop past the dim is kept (a mask may cut it;
    the access is bounds-checked once the mask is applied); negative bounds count from the end."""
    if isinstance(key, DynSlice):
        return int(key.start), int(key.start) + key.size * key.step, key.step
    if all(bound is None or bound >= 0 for bound in (key.start, key.stop)):
        return key.start or 0, size if key.stop is None else key.stop, key.step or 1
    return key.indices(size)


def mask_box(mask: Predicate | None, shape: tuple[int, ...]) -> tuple[slice, ...] | None:
    """The rectangle of iterations of `shape` that `mask` keeps (None: no mask, all of them).
    The old compiler turns a mask into access-pattern bounds, so a mask must cut a rectangle."""
    if mask is None or mask is True or mask is np.True_:  # a condition known when tracing: all or nothing
        return None
    if mask is False or mask is np.False_:
        return tuple(slice(0, 0) for _ in shape)
    if not isinstance(mask, Predicate):
        raise ShapeError(f"mask={mask!r} is not a predicate of index expressions",
                         hint="build masks from nl.arange/nl.mgrid values, e.g. (i_p < 64) & (i_f < 256)")
    try:
        keep = np.broadcast_to(mask.values, shape) if mask.values.ndim <= len(shape) else None
    except ValueError:
        keep = None
    if keep is None:
        raise ShapeError(f"mask of shape {list(mask.values.shape)} does not fit the iteration space "
                         f"{list(shape)}")
    box = tuple(_axis_run(keep, axis) for axis in range(len(shape)))
    if keep.any() and not keep[box].all():
        raise UnsupportedError("mask= that is not a rectangle of iterations (e.g. a triangle) is not "
                               "emulated", what="mask= non-rectangular",
                               hint="use nisa.affine_select for triangular masks")
    return box


def _axis_run(keep: np.ndarray, axis: int) -> slice:
    """The run of positions along `axis` where some iteration is kept (empty when none is)."""
    others = tuple(a for a in range(keep.ndim) if a != axis)
    kept = np.flatnonzero(keep.any(axis=others) if others else keep)
    if kept.size == 0:
        return slice(0, 0)
    if kept[-1] - kept[0] + 1 != kept.size:
        raise UnsupportedError("mask= that keeps a non-contiguous set of rows or columns is not emulated",
                               what="mask= non-contiguous")
    return slice(int(kept[0]), int(kept[-1]) + 1)
