"""`cast`: any numbers -> any format, with round-to-nearest-even or stochastic rounding.

Inputs pass through float32 first, as the engines compute in fp32 (reference §1.6); float64 is
therefore rounded twice. Rounding defaults follow the Neuron runtime switches
NEURON_RT_STOCHASTIC_ROUNDING_EN (0/1) and NEURON_RT_STOCHASTIC_ROUNDING_SEED (default 0) [N21][N22],
which apply to float targets only. Float -> int rounds half to even (or stochastically when asked),
saturates to the int range and maps NaN to 0, as the NKI simulator does to match hardware [N19].
"""

from __future__ import annotations

import contextlib
import contextvars
import os

import numpy as np

from trnsim.errors import ConfigError, FormatError
from trnsim.numerics import fast, params
from trnsim.numerics.engine import decode, encode
from trnsim.numerics.formats import FloatFormat, IntFormat, get_float_format, get_format

ROUNDINGS = ("nearest", "stochastic")
SR_ENABLE_ENV = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
SR_SEED_ENV = "NEURON_RT_STOCHASTIC_ROUNDING_SEED"
FLOAT32 = get_format("float32")

_stream: contextvars.ContextVar[np.random.Generator | None] = contextvars.ContextVar(
    "trnsim_rounding_stream", default=None)


def default_rounding() -> str:
    """The rounding NEURON_RT_STOCHASTIC_ROUNDING_EN selects ("nearest" when unset)."""
    value = os.environ.get(SR_ENABLE_ENV, "0").strip()
    if value not in ("0", "1", ""):
        raise ConfigError(f"{SR_ENABLE_ENV}={value!r} is not 0 or 1")
    return "stochastic" if value == "1" else "nearest"


def _env_seed() -> int:
    value = os.environ.get(SR_SEED_ENV, "0").strip() or "0"
    try:
        seed = int(value, 0)
    except ValueError:
        seed = -1
    if seed < 0:
        raise ConfigError(f"{SR_SEED_ENV}={value!r} is not a non-negative integer")
    return seed


def random_stream(seed=None) -> np.random.Generator:
    """The random source of stochastic rounding: a Generator, a fresh one for an int seed, or the
    running stream of this context (seeded once from NEURON_RT_STOCHASTIC_ROUNDING_SEED)."""
    seed = params.seed(seed)
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None:
        return np.random.Generator(np.random.SFC64(seed))
    stream = _stream.get()
    if stream is None:
        stream = np.random.Generator(np.random.SFC64(_env_seed()))
        _stream.set(stream)
    return stream


@contextlib.contextmanager
def stochastic_seed(seed: int):
    """Restart the running stochastic-rounding stream from `seed` inside the block."""
    seed = params.integer(seed, "seed", minimum=0)
    token = _stream.set(np.random.Generator(np.random.SFC64(seed)))
    try:
        yield
    finally:
        _stream.reset(token)


def as_float32(x, what: str = "x") -> np.ndarray:
    """x as a float32 array; FormatError for data that are not real numbers. Values beyond
    float32's range become ±Inf, as rounding to float32 defines (so no overflow warning), and a
    float64 signalling NaN becomes a NaN (so no invalid-value warning)."""
    arr = params.real_array(x, what)
    with np.errstate(over="ignore", invalid="ignore"):
        return arr.astype(np.float32, copy=False)


def cast(x, fmt, rounding: str | None = None, seed=None, saturate: bool | None = None,
         generic: bool = False) -> np.ndarray:
    """Round `x` into format `fmt`; returns an ndarray of `get_format(fmt).numpy_dtype`.

    rounding: "nearest" (RNE), "stochastic", or None for the NEURON_RT_STOCHASTIC_ROUNDING_EN
    default. seed: int or Generator for reproducible SR; None uses the running stream.
    saturate: True clamps overflow (and ±Inf) to ±max; None keeps the format's own rule.
    generic: use only the bit-arithmetic engine (no ml_dtypes fast path); for testing.

    >>> cast([257.0], "bfloat16").astype(float).tolist()
    [256.0]
    """
    fmt = get_format(fmt)
    if rounding is not None:
        params.choice(rounding, "rounding", ROUNDINGS)
    seed = params.seed(seed)
    saturate = params.flag(saturate, "saturate", optional=True)
    generic = params.flag(generic, "generic")
    if isinstance(fmt, IntFormat):
        result = _cast_int(x, fmt, rounding or "nearest", seed, saturate)
    else:
        result = _cast_float(x, fmt, rounding or default_rounding(), seed, bool(saturate), generic)
    return np.asarray(result)  # numpy ufuncs turn 0-d arrays into scalars


def _cast_float(x, fmt: FloatFormat, rounding: str, seed, saturate: bool, generic: bool) -> np.ndarray:
    x32 = as_float32(x, "x")
    if fmt == FLOAT32 and not generic:  # no bits to drop, so rounding mode does not matter
        return fast.to_float32(x32, fmt, saturate)
    if rounding == "stochastic":
        rng = random_stream(seed)
        if not generic and fast.has_fast_sr(fmt):
            return fast.stochastic(x32, fmt, rng, saturate)
        return from_codes(encode(x32, fmt, saturate=saturate, random_bits=_raw64(rng, x32.size)), fmt)
    if not generic and fast.has_fast_rne(fmt):
        return fast.nearest(x32, fmt, saturate)
    return from_codes(encode(x32, fmt, saturate=saturate), fmt)


def _raw64(rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.bit_generator.random_raw(size)


def from_codes(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Codes as an array of the format's own dtype (bits reinterpreted) or as float32 values."""
    fmt = get_float_format(fmt)
    dtype = fmt.numpy_dtype
    if fmt.ml_dtypes_name is not None and dtype.itemsize == fmt.code_dtype.itemsize:
        codes = params.integer_array(codes, "codes", minimum=0, maximum=(1 << fmt.bits) - 1)
        return codes.astype(fmt.code_dtype).view(dtype)
    return decode(codes, fmt)


def to_codes(values, fmt) -> np.ndarray:
    """The codes (unsigned ints) of values already in `fmt`'s dtype, or rounded into it (RNE)."""
    fmt = get_float_format(fmt)
    arr = params.array(values, "values")
    if arr.dtype == fmt.numpy_dtype and fmt.ml_dtypes_name is not None:
        return arr.view(fmt.code_dtype) if arr.dtype.itemsize == fmt.code_dtype.itemsize else arr
    return encode(as_float32(arr, "values"), fmt).astype(fmt.code_dtype)


def _cast_int(x, fmt: IntFormat, rounding: str, seed, saturate: bool | None) -> np.ndarray:
    if saturate is False:
        raise FormatError(f"casts to {fmt.name} always saturate", hint="leave saturate as None or True")
    arr = params.real_array(x, "x")
    if arr.dtype.kind not in "iub":
        arr = as_float32(arr, "x").astype(np.float64)
        if fmt.bits == 1:
            return arr != 0
        if rounding == "stochastic":
            arr = np.floor(arr + random_stream(seed).random(arr.shape))
        else:
            arr = np.rint(arr)
        arr = np.nan_to_num(arr, nan=0.0, posinf=fmt.max, neginf=fmt.min)
    elif fmt.bits == 1:
        return arr != 0
    return np.clip(arr, fmt.min, fmt.max).astype(fmt.numpy_dtype)
