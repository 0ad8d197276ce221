"""The math of the old `nl`: element-wise calls with broadcasting and `mask=`, reductions, and
the 0.6 conveniences (softmax, rms_norm, ...) under the old calling convention.

Element-wise calls issue what the 0.6 `nl` calls issue (tensor_tensor, tensor_scalar with a
number or [P, 1] column, activation); the old API also broadcasts [1, F] and [P, 1] tiles
against each other, which is a stride-0 view here.
"""

from __future__ import annotations

from trnsim.errors import ArgumentError, ShapeError, UnsupportedError
from trnsim.nki import calls, dtypes
from trnsim.nki import isa as nisa06
from trnsim.nki import language as nl06
from trnsim.nki.legacy.operands import ARGUMENTS as _ARGUMENTS
from trnsim.nki.legacy.operands import HELPERS as _HELPERS
from trnsim.nki.legacy.operands import Call, is_tile, new_tile, result_dtype
from trnsim.nki.legacy.tile import Tile, wrap

_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod", "mod",
           "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
           "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
           "right_shift")
_COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                          "logical_and", "logical_or", "logical_xor"})
_UNARY = ("exp", "log", "sqrt", "rsqrt", "cos", "tan", "arctan", "abs", "square", "negative", "sign",
          "ceil", "floor", "trunc", "relu", "sigmoid", "tanh", "gelu", "gelu_dx", "gelu_apprx_sigmoid",
          "gelu_apprx_tanh", "silu", "silu_dx", "softplus", "mish", "erf", "erf_dx")
_REDUCTIONS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply"}


def _is_column(value, shape) -> bool:
    """A [P, 1] tile against a wider [P, F] space: the per-partition scalar of tensor_scalar."""
    return (is_tile(value) and len(shape) == 2 and tuple(value.shape) in ((shape[0], 1), (shape[0],))
            and shape[1] > 1)


def binary(name: str, x, y, dtype=None, mask=None, out: Tile | None = None):
    """x op y over the broadcast shape; into `out` when given (in-place operators)."""
    if not is_tile(x) and not is_tile(y):
        raise ArgumentError(f"x and y are both numbers ({x!r}, {y!r}); nl.{name} takes at least one tile")
    call = Call([x, y], mask)
    given = dtype
    dtype = result_dtype(given, x, y) if given is not None or name not in _COMPARISONS else "bool_"
    if name == "divide" and given is None and dtypes.dtype(dtype).numpy.kind in "iu":
        dtype = "float32"  # true division of integers gives floats, as in numpy
    tile, dst = (out, call.view(out, broadcast=False)) if out is not None else call.output(dtype)
    if call.empty:
        return tile
    if is_tile(x) and (_is_column(y, call.shape) or not is_tile(y)):
        operand = call.column(y) if is_tile(y) else y
        nisa06.tensor_scalar(dst=dst, data=call.operand(x), op0=name, operand0=operand)
    elif is_tile(y) and (_is_column(x, call.shape) or not is_tile(x)):
        operand = call.column(x) if is_tile(x) else x
        nisa06.tensor_scalar(dst=dst, data=call.operand(y), op0=name, operand0=operand, reverse0=True)
    else:
        nisa06.tensor_tensor(dst=dst, data1=call.operand(x), data2=call.operand(y), op=name)
    return tile


def unary(name: str, x, dtype=None, mask=None):
    call = Call([x], mask)
    tile, dst = call.output(result_dtype(dtype, x))
    if not call.empty:
        nisa06.activation(dst=dst, op=name, data=call.operand(x))
    return tile


def _binary(name: str):
    def op(x, y, dtype=None, mask=None):
        return binary(name, x, y, dtype, mask)
    op.__name__ = op.nki_op = name
    op.__doc__ = f"Element-wise {name}, broadcasting [1, F] / [P, 1] tiles and numbers."
    return op


def _unary(name: str):
    def op(x, dtype=None, mask=None):
        return unary(name, x, dtype, mask)
    op.__name__ = op.nki_op = name
    op.__doc__ = f"Element-wise {name} on the Scalar engine."
    return op


def _delegate(function, name: str):
    """A 0.6 `nl` call under the old convention: tiles in, a tile out. A mask cuts the tile
    operands to its rectangle; the result is then copied into the rectangle of a full-size tile."""
    def op(*args, mask=None, **kwargs):
        if not args:
            raise ArgumentError(f"nl.{name} takes its operand first (nl.{name}(x, ...))")
        call = Call([args[0]] if is_tile(args[0]) else [], mask)
        reduced = _reduced_axes(name, args, kwargs, len(call.shape))
        def cut(value):
            return call.view(value, broadcast=False) if is_tile(value) else value
        if call.empty:
            raise UnsupportedError(f"nl.{name} with a mask that keeps nothing is not emulated",
                                   what=f"nl.{name} empty mask")
        result = function(*map(cut, args), **{k: cut(v) for k, v in kwargs.items()})
        if result.ndim == 1 and result.buffer is not None and len(call.shape) > 1:
            result = result.expand_dim(1)  # a tile keeps its partition dim: [P] is the [P, 1] column
        if call.box is None:
            return wrap(result)
        return _into_full(result, call, reduced)
    op.__name__ = name
    op.nki_op = getattr(function, "nki_op", name)
    op.__doc__ = function.__doc__
    return op


_AXIS_CALLS = frozenset({*_REDUCTIONS, "mean", "var", "all"})
"""Delegated calls whose second argument (or `axis=`) names the dims they reduce."""


def _reduced_axes(name: str, args: tuple, kwargs: dict, rank: int) -> set[int]:
    """The dims a delegated call reduces; the partition dim is refused, as the SDK documents (SDK
    2.26 nl.sum and the other reductions: axis "must be free dimensions, not partition dimension")."""
    axis = kwargs.get("axis", args[1] if len(args) > 1 else None) if name in _AXIS_CALLS else None
    if axis is None or not rank:
        return set()
    reduced = {a % rank for a in (axis if isinstance(axis, tuple | list) else (axis,))}
    if 0 in reduced:
        raise ShapeError(f"axis={axis} names the partition dim (0); the old API reduces free dims only",
                         hint="use nisa.tensor_partition_reduce, or transpose the tile first")
    return reduced


def _into_full(part, call: Call, reduced: set[int]) -> Tile:
    """A result computed on the mask's rectangle, placed in a tile of the unmasked size; the dims
    the call reduced keep the result's size."""
    kept = [d not in reduced and len(range(*b.indices(n))) == n_part
            for d, (b, n, n_part) in enumerate(zip(call.box, call.shape, part.shape, strict=False))]
    box = tuple(b if keep else slice(None) for b, keep in zip(call.box, kept, strict=False))
    shape = tuple(n if keep else n_part
                  for n, n_part, keep in zip(call.shape, part.shape, kept, strict=False))
    tile = new_tile(shape, part.dtype)
    nisa06.tensor_copy(dst=tile.base[box], src=part, engine=nisa06.engine.vector)
    return tile


_where = _delegate(nl06.where, "where")


def where(condition, x, y, dtype=None, mask=None):
    """x where condition holds, else y, in the old API's promoted dtype of x and y."""
    return _where(condition, x, y, dtype=result_dtype(dtype, x, y), mask=mask)


PUBLIC = {
    **{name: _binary(name) for name in (*_BINARY, "abs_max", "abs_min")},
    **{name: _unary(name) for name in _UNARY},
    **{name: _delegate(getattr(nl06, name), name) for name in (
        *_REDUCTIONS, "mean", "var", "all", "softmax", "rms_norm", "reciprocal", "sin",
        "logical_not", "invert", "dropout")},
    "where": where,
    "bypass": nl06.bypass, "prelu": nl06.prelu, "average": nl06.average,
}
"""The math names of the old nl (legacy/language.py adds them to its namespace)."""
PUBLIC["bitwise_not"] = PUBLIC["invert"]
calls.checked_calls(PUBLIC, "nl", _ARGUMENTS, _HELPERS)
