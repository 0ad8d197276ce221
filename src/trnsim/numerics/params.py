"""Checks of the arguments users pass to numerics functions.

A bad argument is a FormatError that names the parameter and what it got, raised before numpy
sees it (numpy would raise a TypeError, ValueError or IndexError of its own, or round a float
axis down and carry on).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from trnsim.errors import FormatError


def shown(value) -> str:
    text = repr(value)
    return f"{text[:60]}..." if len(text) > 60 else text


def integer(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as a Python int within [minimum, maximum]; bools and floats are refused."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise FormatError(f"{name} must be an integer, got {shown(value)} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise FormatError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise FormatError(f"{name} must be at most {maximum}, got {value}")
    return value


def flag(value, name: str, *, optional: bool = False) -> bool | None:
    """`value` as a bool (None passes through when `optional`)."""
    if value is None and optional:
        return None
    if not isinstance(value, bool | np.bool_):
        allowed = "True, False or None" if optional else "True or False"
        raise FormatError(f"{name} must be {allowed}, got {shown(value)} ({type(value).__name__})")
    return bool(value)


def choice(value, name: str, choices) -> str:
    """`value` when it is one of the string `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise FormatError(f"unknown {name} {shown(value)}", hint=f"use one of {', '.join(choices)}")
    return value


def axis(value, shape: tuple[int, ...], name: str = "axis") -> int:
    """`value` as a non-negative axis of an array of `shape` (negative values count from the end)."""
    if not shape:
        raise FormatError(f"{name} {shown(value)} needs an array with at least one axis, got a scalar")
    value = integer(value, name)
    if not -len(shape) <= value < len(shape):
        raise FormatError(f"{name} {value} does not exist in an array of shape {shape}")
    return value % len(shape)


def array(x, name: str) -> np.ndarray:
    """np.asarray(x), with ragged nestings and other objects numpy cannot hold refused by name."""
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as error:
        raise FormatError(f"{name} is not an array numpy can hold: {error}") from None


_ML_FLOAT_NAMES = {n for n in dir(ml_dtypes) if n.startswith(("float", "bfloat"))}
_ML_INT_NAMES = {n for n in dir(ml_dtypes) if n.startswith(("int", "uint"))}  # int1/2/4, uint1/2/4


def real_array(x, name: str) -> np.ndarray:
    """np.asarray(x) when it holds real numbers (bool, int, float or an ml_dtypes float); ml_dtypes'
    narrow ints become int8/uint8 (exactly), as numpy's own functions cannot compute with them."""
    arr = array(x, name)
    if arr.dtype.kind in "fiub" or arr.dtype.name in _ML_FLOAT_NAMES:
        return arr
    if arr.dtype.name in _ML_INT_NAMES:
        return arr.astype(np.uint8 if arr.dtype.name.startswith("u") else np.int8)
    raise FormatError(f"{name} has dtype {arr.dtype}, which is not a real number type",
                      hint="pass float or integer data")


def stored_array(value, name: str) -> np.ndarray:
    """`value` when it is already an ndarray: a field of a result object (MXArray, SparseArray),
    which is kept as given rather than converted."""
    if not isinstance(value, np.ndarray):
        raise FormatError(f"{name} must be a numpy array, got {shown(value)} ({type(value).__name__})")
    return value


def integer_array(x, name: str, *, minimum: int, maximum: int) -> np.ndarray:
    """np.asarray(x) when it holds integers within [minimum, maximum]."""
    arr = array(x, name)
    if arr.dtype.kind not in "iu":
        raise FormatError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size and (arr.min() < minimum or arr.max() > maximum):
        bad = arr.min() if arr.min() < minimum else arr.max()
        raise FormatError(f"{name} must lie in {minimum}..{maximum}, got {int(bad)}")
    return arr


def seed(value, name: str = "seed"):
    """A random seed: None, a numpy Generator, or a non-negative integer (any size)."""
    if value is None or isinstance(value, np.random.Generator):
        return value
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise FormatError(f"{name} must be a non-negative integer, a numpy Generator or None, got "
                          f"{shown(value)} ({type(value).__name__})")
    return integer(value, name, minimum=0)
