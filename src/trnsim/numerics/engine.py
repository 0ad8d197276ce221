"""The generic rounding engine: float32 bits -> codes of any `FloatFormat`, and codes -> float32.

This is integer arithmetic on the float32 bit pattern, driven only by the format description, so
one implementation serves every format (and cFP8 with any bias). The fast paths in `cast.py` must
agree with it bit for bit; the tests compare it against ml_dtypes over every 16-bit input.

Rounding a finite |x| = sig * 2^(e - 23) (sig with its implicit bit, e the true exponent):
the quantum of the target at x is 2^(max(e, emin) - M), i.e. sig loses `shift` low bits. With
n = the rounded sig >> shift, the magnitude code is ((max(e, emin) + bias - s) << M) + n - lead,
where s = 1 and lead = 0 for formats with subnormals (their exponent field 0 is denormal) and
s = 0, lead = 2^M otherwise. A carry out of the mantissa lands in the exponent on its own.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import FormatError
from trnsim.numerics import params
from trnsim.numerics.formats import FloatFormat, get_float_format

_CHUNK = 1 << 20  # elements per pass: keeps the int64 temporaries of one pass to tens of MB


def refuse_nan(flat: np.ndarray, shape: tuple, fmt: FloatFormat) -> None:
    """FormatError naming the first NaN of `flat` (laid out as `shape`) when `fmt` has no NaN."""
    if fmt.specials == "none" and np.isnan(flat).any():
        where = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(np.isnan(flat))[0]), shape))
        raise FormatError(f"{fmt.name} has no NaN, but the input holds NaN (first at index {where})",
                          hint="replace NaNs first; MX quantisation marks such blocks with a NaN scale")


def encode(x32: np.ndarray, fmt: FloatFormat, *, saturate: bool = False,
           random_bits: np.ndarray | None = None) -> np.ndarray:
    """Codes of `fmt` (uint32) for float32 `x32`: RNE, or stochastic given 64-bit `random_bits`.

    Overflow follows `fmt.specials` (Inf, NaN or saturation) unless `saturate`, which clamps
    finite overflow and ±Inf to ±max. NaN maps to the format's quiet NaN.
    """
    fmt = get_float_format(fmt)
    saturate = params.flag(saturate, "saturate")
    x32 = params.real_array(x32, "x32")
    flat = np.ascontiguousarray(x32, dtype=np.float32).reshape(-1)
    if random_bits is not None:
        random_bits = params.integer_array(random_bits, "random_bits", minimum=0, maximum=2**64 - 1)
        if random_bits.size != flat.size:
            raise FormatError(f"random_bits has {random_bits.size} values for {flat.size} inputs")
    refuse_nan(flat, np.shape(x32), fmt)
    out = np.empty(flat.shape, np.uint32)
    for start in range(0, flat.size, _CHUNK):
        part = slice(start, start + _CHUNK)
        bits = None if random_bits is None else random_bits.reshape(-1)[part]
        out[part] = _encode_chunk(flat[part].view(np.uint32), fmt, saturate, bits)
    return out.reshape(np.shape(x32))


def _significand(mag: np.ndarray, fmt: FloatFormat, work: type) -> tuple[np.ndarray, np.ndarray]:
    """(sig, e) with |x| = sig * 2^(e - 23); float32 subnormals are normalised when the target
    reaches below float32's normal range (only E8M0, whose smallest value is 2^-127)."""
    field = (mag >> 23).astype(work)
    sig = (mag & 0x7FFFFF).astype(work) | np.where(field > 0, work(1 << 23), work(0))
    e = np.maximum(field, 1) - 127
    if fmt.emin < -126:
        sub = (field == 0) & (sig != 0)
        if sub.any():
            lead = np.frexp(sig[sub].astype(np.float64))[1] - 1  # position of the top set bit
            sig[sub] <<= 23 - lead
            e[sub] -= 23 - lead
    return sig, e


def _round_sig(sig, shift, random_bits):
    """sig >> shift rounded to nearest even, or stochastically with uniform random low bits."""
    one = sig.dtype.type(1)
    mask = (one << shift) - one
    if random_bits is not None:
        return (sig + (random_bits.astype(sig.dtype) & mask)) >> shift
    q = sig >> shift
    rem = sig & mask
    half = one << np.maximum(shift - one, 0)
    return q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))


def _encode_chunk(bits: np.ndarray, fmt: FloatFormat, saturate: bool, random_bits) -> np.ndarray:
    m = fmt.mantissa_bits
    mag = bits & np.uint32(0x7FFFFFFF)
    negative = (bits >> 31).astype(bool)
    # RNE fits in int32 (sig < 2^24, shift <= 25); SR adds up to 62 random bits, so int64.
    work = np.int32 if random_bits is None else np.int64
    sig, e = _significand(mag, fmt, work)
    e_q = np.maximum(e, fmt.emin)
    # SR needs the full discarded width (up to 62 bits keeps P(up) exact to 2^-38); RNE caps at 25
    # because sig < 2^24 then lies below half a quantum and rounds to zero anyway.
    shift = np.minimum(23 - m + (e_q - e), 62 if random_bits is not None else 25)
    n = _round_sig(sig, shift, random_bits)
    s, lead = (1, 0) if fmt.subnormals else (0, 1 << m)
    code = ((e_q + fmt.bias - s) << m) + n - lead
    code = np.maximum(code, 0)  # below the smallest value of a format without zero: that value
    is_nan = mag > 0x7F800000
    overflow = (code > fmt.max_code) & ~is_nan
    if saturate or fmt.specials == "none":
        code = np.where(overflow, fmt.max_code, code)
    else:
        code = np.where(overflow, fmt.inf_code if fmt.has_inf else fmt.nan_code, code)
    if fmt.has_nan:
        code = np.where(is_nan, fmt.nan_code, code)
    if not fmt.has_zero:  # E8M0: zero has no code
        code = np.where(mag == 0, fmt.nan_code, code)
    if not fmt.signed:  # negative values have no code either
        return np.where(negative & (mag != 0), fmt.nan_code, code).astype(np.uint32)
    sign_bit = work(1) << (fmt.exponent_bits + m)
    return (code | np.where(negative, sign_bit, 0)).astype(np.uint32)


def decode(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """float32 values of `fmt` codes (exact: every format here fits inside float32)."""
    fmt = get_float_format(fmt)
    codes = params.integer_array(codes, "codes", minimum=0, maximum=(1 << fmt.bits) - 1).astype(np.int64)
    m = fmt.mantissa_bits
    width = fmt.exponent_bits + m
    mag = codes & ((1 << width) - 1)
    field = mag >> m
    mant = mag & ((1 << m) - 1)
    normal = (field > 0) | (not fmt.subnormals)
    sig = np.where(normal, mant + (1 << m), mant)
    exp = np.where(normal, field, 1) - fmt.bias - m
    value = np.ldexp(sig.astype(np.float64), exp.astype(np.int32))
    if fmt.has_inf:
        value = np.where(mag == fmt.inf_code, np.inf, value)
        value = np.where(mag > fmt.inf_code, np.nan, value)
    elif fmt.specials == "fn":
        value = np.where(mag == fmt.nan_code, np.nan, value)
    if fmt.signed:
        value = np.where((codes >> width) & 1 == 1, -value, value)
    return value.astype(np.float32)
