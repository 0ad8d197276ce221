"""Fast paths of `cast`, each bit-identical to the generic engine in encode.py (tests check it).

RNE: ml_dtypes' astype, where its dtype has exactly our semantics (every format it has except
E8M0, whose float32-subnormal rounding has a quirk, reference §3.4).
"""

from __future__ import annotations

import numpy as np

from trnsim.numerics.formats import FloatFormat

_ASTYPE_EXACT = frozenset({"bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
                           "float8_e3m4", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"})


def has_fast_rne(fmt: FloatFormat) -> bool:
    return fmt.name in _ASTYPE_EXACT and fmt.ml_dtypes_name == fmt.name


def nearest(x32: np.ndarray, fmt: FloatFormat, saturate: bool) -> np.ndarray:
    """RNE through ml_dtypes; saturation clamps first (max is representable, so it is exact)."""
    if fmt.specials == "none" and np.isnan(x32).any():
        from trnsim.numerics.encode import encode
        encode(x32, fmt)  # raises the FormatError that names the first NaN
    if saturate:
        x32 = np.clip(x32, -fmt.max, fmt.max)
    # Overflow to Inf/NaN is the format's own rule here, not an accident worth a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        return x32.astype(fmt.numpy_dtype)


def has_fast_sr(fmt: FloatFormat) -> bool:
    return False


def stochastic(x32, fmt, rng, saturate):
    raise AssertionError("no fast stochastic path")
