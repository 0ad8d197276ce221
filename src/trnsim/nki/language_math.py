"""`nki.language` math: element-wise ops, activations, comparisons, reductions, softmax, rms_norm.

Every function here is also an operator name: `nisa.tensor_tensor(..., op=nl.add)` works because
each carries `nki_op`. Binary ops take two same-shaped tiles (tensor_tensor), or a tile and a
number or [P,1] tile (tensor_scalar); NKI does no other broadcasting.
"""

from __future__ import annotations

import functools
import math

from trnsim.errors import ArgumentError, ShapeError, UnsupportedError
from trnsim.nki import dtypes
from trnsim.nki import isa as nisa
from trnsim.nki.tensor import NkiTensor
from trnsim.nki.tensor import axis_index as _axis_index

__all__ = [
    "where", "softmax", "rms_norm", "dropout", "mean", "var", "all", "sin", "reciprocal",
    "logical_not", "invert", "bitwise_not", "bypass", "prelu", "average", "add", "subtract",
    "multiply", "divide", "maximum", "minimum", "abs_max", "abs_min", "power", "fmod", "mod",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
    "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
    "right_shift", "exp", "log", "sqrt", "rsqrt", "cos", "tan", "arctan", "abs", "square",
    "negative", "sign", "ceil", "floor", "trunc", "relu", "sigmoid", "tanh", "gelu", "gelu_dx",
    "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "gelu_apprx_tanh", "silu", "silu_dx", "softplus",
    "mish", "erf", "erf_dx", "sum", "max", "min", "prod",
]


def _new(shape, dtype):
    from trnsim.nki.language import ndarray, sbuf
    return ndarray(tuple(shape), dtype, sbuf)


def _is_column(y, x) -> bool:
    if not isinstance(y, NkiTensor) or y.shape == x.shape:
        return False
    return y.shape[0] == x.shape[0] and y.size == y.shape[0]


def _result_dtype(dtype, *values):
    """`dtype=` if given, else the tiles' promoted dtype (`dtypes.promoted`: bf16 with fp32 is fp32
    whichever comes first); a number takes the tile's dtype, as a weakly typed scalar does."""
    if dtype is not None:
        return dtype
    tiles = [dtypes.dtype(v.dtype) for v in values if isinstance(v, NkiTensor)]
    return functools.reduce(dtypes.promoted, tiles).name if tiles else "float32"


def _binary(name: str):
    def op(x, y, dtype=None):
        if not isinstance(x, NkiTensor) and not isinstance(y, NkiTensor):
            raise ArgumentError(f"x and y are both numbers ({x!r}, {y!r}); nl.{name} takes at least one tile")
        both = isinstance(x, NkiTensor) and isinstance(y, NkiTensor)
        dtype = _result_dtype(dtype, x, y)
        if both and _is_column(x, y) and not _is_column(y, x):  # [P, 1] op [P, F]: the column is operand0
            out = _new(y.shape, dtype)
            return nisa.tensor_scalar(dst=out, data=y, op0=name, operand0=x, reverse0=True)
        if both and not _is_column(y, x):
            out = _new(x.shape, dtype)
            return nisa.tensor_tensor(dst=out, data1=x, data2=y, op=name)
        if isinstance(x, NkiTensor):
            out = _new(x.shape, dtype)
            return nisa.tensor_scalar(dst=out, data=x, op0=name, operand0=y)
        out = _new(y.shape, dtype)
        return nisa.tensor_scalar(dst=out, data=y, op0=name, operand0=x, reverse0=True)
    op.__name__ = op.nki_op = name
    op.scalar_arguments = ("x", "y")
    op.__doc__ = f"Element-wise {name} of two tiles, or of a tile and a scalar / [P,1] tile."
    return op


def _unary(name: str):
    def op(x, dtype=None):
        out = _new(x.shape, dtype or x.dtype)
        return nisa.activation(dst=out, op=name, data=x)
    op.__name__ = op.nki_op = name
    op.__doc__ = f"Element-wise {name} on the Scalar engine."
    return op


def _reduction(name: str):
    def op(x, axis, dtype=None, keepdims=False):
        axes = _axes(x, axis)
        shape = [1 if d in axes else s for d, s in enumerate(x.shape) if keepdims or d not in axes]
        out = _new(shape or [1], dtype or x.dtype)
        if axes == (0,):
            return nisa.tensor_partition_reduce(dst=out, op=name, data=x)
        kept = [d for d in range(x.ndim) if d not in axes]
        if axes != tuple(range(x.ndim - len(axes), x.ndim)):  # the ISA reduces trailing dims: permute
            x, axes = x.permute(kept + list(axes)), tuple(range(len(kept), x.ndim))
        return nisa.tensor_reduce(dst=out, op=name, data=x, axis=axes, keepdims=keepdims)
    op.__name__ = op.nki_op = name
    return op


# One function per NKI operator; each doubles as the operator name (op=nl.add).
add = _binary("add")
subtract = _binary("subtract")
multiply = _binary("multiply")
divide = _binary("divide")
maximum = _binary("maximum")
minimum = _binary("minimum")
abs_max = _binary("abs_max")
abs_min = _binary("abs_min")
power = _binary("power")
fmod = _binary("fmod")
mod = _binary("mod")
equal = _binary("equal")
not_equal = _binary("not_equal")
less = _binary("less")
less_equal = _binary("less_equal")
greater = _binary("greater")
greater_equal = _binary("greater_equal")
logical_and = _binary("logical_and")
logical_or = _binary("logical_or")
logical_xor = _binary("logical_xor")
bitwise_and = _binary("bitwise_and")
bitwise_or = _binary("bitwise_or")
bitwise_xor = _binary("bitwise_xor")
left_shift = _binary("left_shift")
right_shift = _binary("right_shift")
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
cos = _unary("cos")
tan = _unary("tan")
arctan = _unary("arctan")
abs = _unary("abs")
square = _unary("square")
negative = _unary("negative")
sign = _unary("sign")
ceil = _unary("ceil")
floor = _unary("floor")
trunc = _unary("trunc")
relu = _unary("relu")
sigmoid = _unary("sigmoid")
tanh = _unary("tanh")
gelu = _unary("gelu")
gelu_dx = _unary("gelu_dx")
gelu_apprx_sigmoid = _unary("gelu_apprx_sigmoid")
gelu_apprx_sigmoid_dx = _unary("gelu_apprx_sigmoid_dx")
gelu_apprx_tanh = _unary("gelu_apprx_tanh")
silu = _unary("silu")
silu_dx = _unary("silu_dx")
softplus = _unary("softplus")
mish = _unary("mish")
erf = _unary("erf")
erf_dx = _unary("erf_dx")
sum = _reduction("add")  # noqa: A001 - NKI's name
max = _reduction("maximum")  # noqa: A001 - NKI's name
min = _reduction("minimum")  # noqa: A001 - NKI's name
prod = _reduction("multiply")  # noqa: A001 - NKI's name


# Operator constants for activate2 / tensor_scalar that are not functions.
bypass, prelu, average = "bypass", "prelu", "average"


def reciprocal(x, dtype=None):
    """1/x on the Vector engine."""
    return nisa.reciprocal(dst=_new(x.shape, dtype or x.dtype), data=x)


reciprocal.nki_op = "reciprocal"


def sin(x, dtype=None):
    """sin with range reduction to [-pi, pi) first (the bare activation has none)."""
    reduced = _new(x.shape, "float32")
    nisa.tensor_scalar(dst=reduced, data=x, op0="add", operand0=math.pi, op1="mod", operand1=2 * math.pi)
    nisa.tensor_scalar(dst=reduced, data=reduced, op0="subtract", operand0=math.pi)
    return nisa.activation(dst=_new(x.shape, dtype or x.dtype), op="sin", data=reduced)


sin.nki_op = "sin"


def logical_not(x, dtype=None):
    return nisa.tensor_scalar(dst=_new(x.shape, dtype or x.dtype), data=x, op0="equal", operand0=0)


def invert(x, dtype=None):
    """Bitwise NOT of an integer tile."""
    return nisa.tensor_scalar(dst=_new(x.shape, dtype or x.dtype), data=x, op0="bitwise_xor", operand0=-1)


bitwise_not = invert


def _axes(x, axis) -> tuple[int, ...]:
    """The reduced dims, each inside the tile (refused, not wrapped, outside it) and named once
    (numpy refuses a repeated axis too)."""
    dims = axis if isinstance(axis, tuple | list) else (axis,)
    found = [_axis_index(a, x.ndim, f"axis={axis!r}") for a in dims]
    if len(set(found)) != len(found):
        raise ShapeError(f"axis={axis!r} names a dim twice")
    return tuple(sorted(found))


def mean(x, axis, dtype=None, keepdims=False):
    axes = _axes(x, axis)
    total = sum(x, axis, dtype="float32", keepdims=keepdims)
    count = math.prod(x.shape[a] for a in axes)
    return nisa.tensor_scalar(dst=_new(total.shape, dtype or x.dtype), data=total, op0="multiply",
                              operand0=1.0 / count)


def var(x, axis, dtype=None, keepdims=False):
    """Population variance along the free axes: mean((x - mean)^2)."""
    centre = mean(x, axis, dtype="float32", keepdims=True)
    centred = _new(x.shape, "float32")
    if centre.size == centre.shape[0]:
        nisa.tensor_scalar(dst=centred, data=x, op0="subtract", operand0=centre)
    else:
        nisa.tensor_tensor(dst=centred, data1=x, data2=centre.broadcast_to(x.shape), op="subtract")
    squared = square(centred)
    return mean(squared, axis, dtype or x.dtype, keepdims)


def all(x, axis, dtype=None):  # noqa: A001 - NKI's name
    return _reduction("logical_and")(x, axis, dtype or "uint8")


def where(condition, x, y, dtype=None):
    """x where condition is non-zero, else y (either may be a number)."""
    like = condition
    out = _new(like.shape, _result_dtype(dtype, x, y))
    if isinstance(y, NkiTensor):
        nisa.tensor_copy(dst=out, src=y)
    else:
        nisa.memset(dst=out, value=y)
    source = x
    if not isinstance(x, NkiTensor):
        source = _new(like.shape, out.dtype)
        nisa.memset(dst=source, value=x)
    return nisa.tensor_copy_predicated(dst=out, src=source, predicate=condition)


where.scalar_arguments = ("x", "y")


def softmax(x, axis=-1, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along the free axis of a [P, F] tile."""
    partitions = x.shape[0]
    peak = _new((partitions, 1), "float32")
    nisa.tensor_reduce(dst=peak, op="maximum", data=x, axis=axis, keepdims=True)
    negated = _new((partitions, 1), "float32")
    nisa.tensor_scalar(dst=negated, data=peak, op0="multiply", operand0=-1.0)
    exps, total = _new(x.shape, "float32"), _new((partitions, 1), "float32")
    nisa.activation(dst=exps, op="exp", data=x, bias=negated, reduce_op="add", reduce_res=total,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    inverse = reciprocal(total, dtype="float32")
    out = _new(x.shape, dtype or x.dtype)
    return nisa.tensor_scalar(dst=out, data=exps, op0="multiply", operand0=inverse)


def rms_norm(x, w, axis=-1, n=None, epsilon=1e-6, dtype=None, compute_dtype=None):
    """x / sqrt(mean(x^2) + epsilon) * w, for a [P, D] tile and w of shape [1, D] or [P, D]: over
    the last axis, the one emulated (another is refused rather than ignored)."""
    if _axis_index(axis, x.ndim, f"nl.rms_norm(axis={axis!r})") != x.ndim - 1:
        raise UnsupportedError(f"axis={axis!r} on a {x.ndim}-d tile: only the last axis is "
                               f"emulated", what="nl.rms_norm axis", hint="transpose so the axis is last")
    partitions, width = x.shape[0], x.shape[-1]
    squares, total = _new(x.shape, "float32"), _new((partitions, 1), "float32")
    nisa.activation(dst=squares, op="square", data=x, reduce_op="add", reduce_res=total,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    rstd = _new((partitions, 1), "float32")
    nisa.activation(dst=rstd, op="rsqrt", data=total, scale=1.0 / (n or width), bias=float(epsilon))
    scaled = _new(x.shape, compute_dtype or "float32")
    nisa.tensor_scalar(dst=scaled, data=x, op0="multiply", operand0=rstd)
    weight = w.broadcast(0, partitions) if w.shape[0] == 1 and partitions > 1 else w
    return nisa.tensor_tensor(dst=_new(x.shape, dtype or x.dtype), data1=scaled, data2=weight, op="multiply")


def dropout(x, rate, dtype=None):
    """nisa.dropout keeps x's dtype, so another `dtype` (a cast, as the nl.dropout docs have it) is a
    copy after it."""
    from trnsim.nki.language import copy
    dropped = _new(x.shape, x.dtype)
    nisa.dropout(dst=dropped, data=x, prob=rate)
    return dropped if dtype is None or dtype == x.dtype else copy(dropped, dtype)
