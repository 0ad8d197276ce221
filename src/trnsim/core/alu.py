"""The engines' arithmetic: ALU operators and ScalarE activation functions, by NKI name.

Arithmetic operators work on fp32 (inputs are cast to fp32 first, reference nki.md §2.3);
bitwise operators work on the integer bit patterns. Comparisons give 1.0 or 0.0. Activation
functions compute in fp32; `sin`, like the hardware's polynomial, does no range reduction (the
reference's example: sin(9.0) is about 27.65 on hardware), reproduced here with an odd polynomial
fitted on [-pi, pi] and evaluated outside it as the hardware does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

F32 = np.float32


def _bitwise(fn: Callable) -> Callable:
    """Integer ops on integers: integer tiles give their stored values (so their bit patterns); a
    float operand (an fp32 tile or a scalar, which arrives as fp32) is converted by value."""
    def apply(a, b):
        a_int, b_int = _as_bits(a), _as_bits(b)
        return fn(a_int, b_int)
    return apply


def _as_bits(x):
    x = np.asarray(x)
    if x.dtype.kind in "iu":
        return x.astype(np.int64)
    return np.asarray(x, F32).astype(np.int64)


def _compare(fn: Callable) -> Callable:
    return lambda a, b: fn(a, b).astype(F32)


def _logical(fn: Callable) -> Callable:
    return lambda a, b: fn(np.asarray(a) != 0, np.asarray(b) != 0).astype(F32)


def _abs_max(a, b):
    """The operand of larger magnitude, sign kept; b on a tie (nki.language.abs_max: abs_max(-5, 3)
    is -5, abs_max(1, -1) is -1)."""
    return np.where(np.abs(a) > np.abs(b), a, b)


def _abs_min(a, b):
    """The operand of smaller magnitude, sign kept; b on a tie (nki.language.abs_min)."""
    return np.where(np.abs(a) < np.abs(b), a, b)


def _mod(a, b):
    return np.mod(a, b)


# name -> (function of two fp32 arrays, identity for reductions or None when not reducible)
ALU: dict[str, tuple[Callable, float | None]] = {
    "add": (np.add, 0.0),
    "subtract": (np.subtract, None),
    "multiply": (np.multiply, 1.0),
    "divide": (np.divide, None),
    "maximum": (np.maximum, -np.inf),
    "minimum": (np.minimum, np.inf),
    "abs_max": (_abs_max, 0.0),
    "abs_min": (_abs_min, np.inf),
    "power": (np.power, None),
    "mod": (_mod, None),
    "fmod": (np.fmod, None),
    "bypass": (lambda a, b: a, None),
    "equal": (_compare(np.equal), None),
    "not_equal": (_compare(np.not_equal), None),
    "less": (_compare(np.less), None),
    "less_equal": (_compare(np.less_equal), None),
    "greater": (_compare(np.greater), None),
    "greater_equal": (_compare(np.greater_equal), None),
    "logical_and": (_logical(np.logical_and), None),
    "logical_or": (_logical(np.logical_or), None),
    "logical_xor": (_logical(np.logical_xor), None),
    "bitwise_and": (_bitwise(np.bitwise_and), None),
    "bitwise_or": (_bitwise(np.bitwise_or), None),
    "bitwise_xor": (_bitwise(np.bitwise_xor), None),
    "left_shift": (_bitwise(np.left_shift), None),
    "right_shift": (_bitwise(lambda a, b: (a & 0xFFFFFFFF) >> b), None),
}
UNARY: dict[str, tuple[Callable, int]] = {
    "abs": (np.abs, 2), "rsqrt": (lambda a: 1.0 / np.sqrt(a), 2), "reciprocal": (lambda a: 1.0 / a, 2),
    "square": (np.square, 4), "relu": (lambda a: np.maximum(a, 0), 4),
    "bitwise_not": (lambda a: np.invert(_as_bits(a)), 2),
}
"""The arithmetic unary operators (name -> function of one fp32 array, first NeuronCore generation):
the "Arithmetic Unary" rows of the NKI ISA operator table (nki.api.shared, tbl-aluop). They serve
as `op0` of tensor_scalar and tensor_scalar_reduce, whose operand0 is then None or 0
(nki.isa.tensor_scalar); square and relu only from trn3 (NKI 0.4.0 release notes); bitwise_not
(`nl.invert`) is the table's "Bitwise Not", a bit-pattern op."""
BITWISE = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
                     "bitwise_not"})
REDUCIBLE = frozenset(name for name, (_, identity) in ALU.items() if identity is not None) | {
    "logical_and", "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor"}

_REDUCE_UFUNC = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
                 "minimum": np.minimum, "logical_xor": np.logical_xor,
                 "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                 "bitwise_xor": np.bitwise_xor, "logical_and": np.logical_and,
                 "logical_or": np.logical_or}


REDUCTIONS = frozenset(_REDUCE_UFUNC) | {"abs_max", "abs_min"}
"""The operators `reduce` takes (the hardware's legal reductions; abs_max and abs_min only as the
accumulating `reduce_op` of an instruction, never as an ALU reduction: MAGNITUDE_OPS)."""
MAGNITUDE_OPS = frozenset({"abs_max", "abs_min"})
"""Operators that NeuronCore-v4 (trn3) brought (nki.language.abs_max / abs_min: "Available only on
NeuronCore-v4 (trn3) and newer"); the ISA's operator table marks them not legal as reductions
(aws-neuron-sdk nki/api/nki.api.shared.rst), while `activation`'s reduce_op lists them
(nki/api/nki/isa/__init__.py)."""
MAGNITUDE_OPS_GENERATION = 4


def alu(name: str) -> Callable:
    """The operator's function (CHECK has made sure the kernel named one of `ALU`)."""
    return ALU[name][0]


def reduce(name: str, x: np.ndarray, axis) -> np.ndarray:
    """Reduce with an ALU operator that the hardware allows as a reduction."""
    if name in MAGNITUDE_OPS:
        return _magnitude_reduce(name, np.asarray(x), axis)
    ufunc = _REDUCE_UFUNC[name]  # CHECK has made sure `name` is one of REDUCTIONS
    if name in BITWISE:
        return ufunc.reduce(_as_bits(x), axis=axis)
    if name.startswith("logical"):
        return ufunc.reduce(x != 0, axis=axis).astype(F32)
    return ufunc.reduce(x, axis=axis)


def _magnitude_reduce(name: str, x: np.ndarray, axis) -> np.ndarray:
    """abs_max / abs_min folded along `axis`: the element of extreme magnitude with its sign, the
    last one on a tie (a fold hands ties to the newer operand)."""
    axes = tuple(a % x.ndim for a in (axis if isinstance(axis, tuple | list) else (axis,)))
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    flat = moved.reshape(*moved.shape[:x.ndim - len(axes)], -1)
    backwards = np.abs(flat)[..., ::-1]
    pick = np.argmax(backwards, axis=-1) if name == "abs_max" else np.argmin(backwards, axis=-1)
    return np.take_along_axis(flat, (flat.shape[-1] - 1 - pick)[..., None], axis=-1)[..., 0]


def _fit_sin() -> np.polynomial.Polynomial:
    """An odd degree-11 least-squares fit of sin on [-pi, pi] (no range reduction outside)."""
    x = np.linspace(-np.pi, np.pi, 2001)
    odd = np.polynomial.polynomial.polyfit(x, np.sin(x), 11)
    odd[::2] = 0.0
    return np.polynomial.Polynomial(odd)


_SIN = _fit_sin()


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _erf(x):
    from math import erf
    return np.vectorize(erf, otypes=[np.float64])(x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _gelu_dx(x):
    return 0.5 * (1.0 + _erf(x / np.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def _silu_dx(x):
    s = _sigmoid(x)
    return s * (1 + x * (1 - s))


def _gelu_sigmoid_dx(x):
    s = _sigmoid(1.702 * x)
    return s + 1.702 * x * s * (1 - s)


ACTIVATIONS: dict[str, Callable] = {
    "copy": lambda x: x, "identity": lambda x: x, "bypass": lambda x: x,
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x, "square": np.square, "abs": np.abs, "negative": np.negative,
    "sign": np.sign, "ceil": np.ceil, "floor": np.floor, "trunc": np.trunc,
    "sin": _SIN, "cos": np.cos, "tan": np.tan, "arctan": np.arctan,
    "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu, "gelu_dx": _gelu_dx, "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    "gelu_apprx_sigmoid_dx": _gelu_sigmoid_dx,
    "silu": lambda x: x * _sigmoid(x), "silu_dx": _silu_dx,
    "softplus": lambda x: np.logaddexp(0, x), "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
    "erf": _erf, "erf_dx": lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x),
}


def apply_activation(name: str, x: np.ndarray) -> np.ndarray:
    """fp32 in, fp32 out (intermediate float64 where numpy promotes is rounded back)."""
    with np.errstate(all="ignore"):
        return np.asarray(ACTIVATIONS[name](x), F32)
