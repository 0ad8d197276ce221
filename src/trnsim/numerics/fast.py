"""Fast paths of `cast`, each bit-identical to the generic engine in engine.py (tests check it).

* RNE into bf16/fp16: ml_dtypes/numpy astype, whose semantics are exactly ours there except for
  NaN: numpy's float16 astype keeps the payload (even a signalling one), so spans holding NaN get
  the engine's quiet NaN written over them.
* float32 into float32 drops no bits: a copy, with the engine's quiet NaN over every NaN.
* RNE into formats of 8 bits or fewer: a lookup table built by the generic engine, indexed by the
  float32 sign, exponent, kept mantissa bits, round bit and a sticky bit (which together decide
  round-to-nearest-even completely).
* Stochastic rounding (the hardware way: add uniform random bits to the bits to be discarded,
  then truncate): formats with float32's exponent range (bf16, tf32) truncate the bits directly;
  formats of 16 bits or fewer read the truncated value's code from a table. Inputs in the
  target's subnormal range (where the discarded width changes) and NaNs go to the generic engine.
Work is done in cache-sized chunks with preallocated buffers.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trnsim.numerics.engine import decode, encode, refuse_nan
from trnsim.numerics.formats import FloatFormat

_CHUNK = 1 << 18
_MAG = np.uint32(0x7FFFFFFF)
_ASTYPE_EXACT = frozenset({"bfloat16", "float16"})
_ASTYPE_KEEPS_NAN_PAYLOAD = frozenset({"float16"})  # ml_dtypes' bfloat16 writes the quiet NaN itself


def _is_table_format(fmt: FloatFormat, max_bits: int) -> bool:
    return (fmt.bits <= max_bits and fmt.emin >= -126 and fmt.exponent_bits < 8
            and fmt.ml_dtypes_name == fmt.name)


def has_fast_rne(fmt: FloatFormat) -> bool:
    return (fmt.name in _ASTYPE_EXACT and fmt.ml_dtypes_name == fmt.name) or _is_table_format(fmt, 8)


def has_fast_sr(fmt: FloatFormat) -> bool:
    return (fmt.exponent_bits == 8 and fmt.subnormals and fmt.bias == 127 and fmt.specials == "ieee"
            and fmt.bits in (16, 19)) or _is_table_format(fmt, 16)


def _output(fmt: FloatFormat, n: int) -> np.ndarray:
    return np.empty(n, fmt.code_dtype if fmt.ml_dtypes_name else np.float32)


def _finish(codes: np.ndarray, fmt: FloatFormat, shape) -> np.ndarray:
    return (codes.view(fmt.numpy_dtype) if fmt.ml_dtypes_name else codes).reshape(shape)


def nearest(x32: np.ndarray, fmt: FloatFormat, saturate: bool) -> np.ndarray:
    """Round to nearest even; `saturate` clamps first (max is representable, so that is exact)."""
    if saturate:
        x32 = np.clip(x32, -fmt.max, fmt.max)
    flat = np.ascontiguousarray(x32).reshape(-1)
    if fmt.name in _ASTYPE_EXACT:
        return _nearest_by_astype(flat, fmt).reshape(x32.shape)
    codes = _nearest_by_table(flat.view(np.uint32), _rne_table(fmt), fmt.mantissa_bits)
    if fmt.specials == "none" and (codes == _NAN_MARK).any():
        encode(x32, fmt)  # raises the FormatError that names the first NaN
    return _finish(codes, fmt, x32.shape)


def to_float32(x32: np.ndarray, fmt: FloatFormat, saturate: bool) -> np.ndarray:
    """A fresh copy of float32 `x32` (clamped when `saturate`) with the engine's quiet NaNs."""
    out = np.array(x32, np.float32, order="C")
    if saturate:
        np.clip(out, -fmt.max, fmt.max, out=out)
    flat = out.reshape(-1)
    if flat.size and np.isnan(flat.max()):  # max() propagates NaN: one cheap pass
        _write_quiet_nans(flat, flat.view(fmt.code_dtype), fmt)
    return out


def _nearest_by_astype(flat: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    out = np.empty(flat.size, fmt.numpy_dtype)
    fix_nans = fmt.name in _ASTYPE_KEEPS_NAN_PAYLOAD

    def run_span(start: int) -> None:
        source, dest = flat[start:start + _SPAN], out[start:start + _SPAN]
        # Overflow to Inf is the format's own rule here, not an accident worth a warning.
        with np.errstate(over="ignore", invalid="ignore"):
            np.copyto(dest, source, casting="unsafe")
        if fix_nans and source.size and np.isnan(source.max()):  # max() propagates NaN: one cheap pass
            _write_quiet_nans(source, dest.view(fmt.code_dtype), fmt)

    _in_spans(flat.size, run_span, _idle_cores)
    return out


def _write_quiet_nans(source: np.ndarray, codes: np.ndarray, fmt: FloatFormat) -> None:
    """The engine's NaN (the format's quiet NaN, input sign kept) wherever `source` is NaN."""
    where = np.flatnonzero(np.isnan(source))
    negative = np.signbit(source[where])
    sign_bit = 1 << (fmt.bits - 1)
    codes[where] = np.where(negative, fmt.nan_code | sign_bit, fmt.nan_code)


def _nearest_by_table(bits: np.ndarray, table: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """table[(top 10+M bits) * 2 + (any lower bit set)], chunk by chunk in reused buffers."""
    shift = 22 - mantissa_bits
    low = np.uint32((1 << shift) - 1)
    out = np.empty(bits.size, table.dtype)
    index = np.empty(_CHUNK, np.uint32)
    sticky = np.empty(_CHUNK, np.uint32)
    for start in range(0, bits.size, _CHUNK):
        b = bits[start:start + _CHUNK]
        idx, stk = index[:b.size], sticky[:b.size]
        np.right_shift(b, shift, out=idx)
        np.left_shift(idx, 1, out=idx)
        np.bitwise_and(b, low, out=stk)
        np.minimum(stk, 1, out=stk)
        np.bitwise_or(idx, stk, out=idx)
        np.take(table, idx, out=out[start:start + b.size])
    return out


_NAN_MARK = 0xFF  # table entry for NaN inputs of formats without NaN (their codes are < 0xFF)


@functools.cache
def _rne_table(fmt: FloatFormat) -> np.ndarray:
    """Code for every (sign, exponent, M+1 mantissa bits, sticky) of a float32 input."""
    shift = 22 - fmt.mantissa_bits
    index = np.arange(1 << (11 + fmt.mantissa_bits), dtype=np.uint32)
    bits = ((index >> 1) << shift) | (index & 1)
    x32 = bits.view(np.float32)
    table = np.full(index.size, _NAN_MARK, np.uint8)
    real = ~np.isnan(x32) if fmt.specials == "none" else slice(None)
    table[real] = encode(x32[real], fmt)
    return table


@functools.cache
def _truncation_table(fmt: FloatFormat, saturate: bool) -> np.ndarray:
    """Code of every float32 whose low 23-M bits are zero (one entry per value, sign included)."""
    shift = 23 - fmt.mantissa_bits
    index = np.arange(1 << (9 + fmt.mantissa_bits), dtype=np.uint32)
    x32 = (index << shift).view(np.float32)
    x32 = np.where(np.isnan(x32), np.float32(np.inf), x32)  # NaN inputs never reach the table
    return encode(x32, fmt, saturate=saturate).astype(fmt.code_dtype)


def stochastic(x32: np.ndarray, fmt: FloatFormat, rng: np.random.Generator, saturate: bool) -> np.ndarray:
    """Stochastic rounding with exact probabilities (all discarded bits get a random partner).

    The work is split into fixed spans, each with its own generator keyed by one draw from `rng`
    and the span's index, so the bits do not depend on how many threads ran the spans.
    """
    if saturate:
        x32 = np.clip(x32, -fmt.max, fmt.max)
    flat = np.ascontiguousarray(x32).reshape(-1)
    refuse_nan(flat, x32.shape, fmt)  # here, so that the error names the index in the whole input
    out = _output(fmt, flat.size)
    key = int(rng.bit_generator.random_raw())
    table = None if fmt.exponent_bits == 8 else _truncation_table(fmt, saturate)

    def run_span(start: int) -> None:
        span_rng = np.random.Generator(np.random.SFC64([key, start // _SPAN]))
        stop = min(start + _SPAN, flat.size)
        # bf16/tf32 need the generic engine only for NaNs; one max() per span finds them
        fix = table is not None or bool(np.isnan(flat[start:stop].max()))
        _stochastic_span(flat[start:stop], out[start:stop], fmt, table, span_rng, saturate, fix)

    _in_spans(flat.size, run_span, _all_cores)  # compute-bound: a shared core still helps
    return _finish(out, fmt, x32.shape)


_HIGH_HALF = 1 if sys.byteorder == "little" else 0  # index of a uint32's high 16 bits as uint16 pairs
_SPAN = 1 << 20  # elements per span: a thread's unit of work, independently seeded for SR


def _in_spans(size: int, run_span, cores: Callable[[], int]) -> None:
    """Call run_span(start) for every span, on up to `cores()` threads (numpy releases the GIL
    inside its loops). Results never depend on the thread count."""
    starts = range(0, size, _SPAN)
    workers = min(len(starts), cores()) if len(starts) > 1 else 1
    if workers <= 1:
        for start in starts:
            run_span(start)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(run_span, starts))


_CPUS = os.cpu_count() or 1


def _all_cores() -> int:
    return _CPUS


def _idle_cores() -> int:
    """Cores not busy with other work: memory-bound casts gain nothing from a busy core."""
    others = os.getloadavg()[0] - 1 if hasattr(os, "getloadavg") else 0.0  # minus this process
    return max(1, min(_CPUS, math.ceil(_CPUS - max(others, 0.0))))


def _stochastic_span(flat, out, fmt: FloatFormat, table, rng: np.random.Generator, saturate: bool,
                     fix: bool) -> None:
    bits = flat.view(np.uint32)
    shift = 23 - fmt.mantissa_bits
    low = np.uint32((1 << shift) - 1)
    rand_dtype = np.uint16 if shift <= 16 else np.uint32  # enough random bits, no more
    per_raw = 8 // np.dtype(rand_dtype).itemsize
    buf = np.empty(_CHUNK, np.uint32)
    for start in range(0, bits.size, _CHUNK):
        b = bits[start:start + _CHUNK]
        y = buf[:b.size]
        rand = rng.bit_generator.random_raw(-(-b.size // per_raw)).view(rand_dtype)[:b.size]
        if shift < 8 * rand.itemsize:
            np.right_shift(rand, 8 * rand.itemsize - shift, out=rand)
        np.add(b, rand, out=y)
        dest = out[start:start + b.size]
        if table is None:
            _store_truncated(y, low, dest, fmt)
        else:
            np.right_shift(y, shift, out=y)
            np.take(table, y, out=dest)
        if fix:
            _fix_special(flat[start:start + b.size], b, dest, fmt, rng, saturate)


def _store_truncated(y: np.ndarray, low: np.uint32, dest: np.ndarray, fmt: FloatFormat) -> None:
    if fmt.bits == 16:  # the high half of each little-endian word: no shift pass needed
        dest[...] = y.view(np.uint16)[_HIGH_HALF::2]
    else:
        np.bitwise_and(y, ~low, out=dest.view(np.uint32))


def _fix_special(x: np.ndarray, b: np.ndarray, dest: np.ndarray, fmt: FloatFormat, rng, saturate) -> None:
    """Redo NaNs and the target's subnormal range (a wider discarded width) with the generic engine."""
    if fmt.exponent_bits == 8:
        special = np.isnan(x)
    else:
        min_normal_bits = np.uint32(np.float32(fmt.min_normal).view(np.uint32))
        special = ((b & _MAG) - min_normal_bits) > (np.uint32(0x7F800000) - min_normal_bits)
    if not special.any():
        return
    idx = np.flatnonzero(special & (b & _MAG != 0))  # exact zeros were right already
    codes = encode(x[idx], fmt, saturate=saturate, random_bits=rng.bit_generator.random_raw(idx.size))
    dest[idx] = codes if fmt.ml_dtypes_name else decode(codes, fmt)
