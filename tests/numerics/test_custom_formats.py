"""The generic engine on formats ml_dtypes does not have (cFP8 splits and biases), against an
independent float64 rounding: scale to an integer number of quanta, np.round (half to even)."""

import numpy as np
import pytest

from trnsim import FormatError
from trnsim.numerics import cast, decode, encode, float_format, get_format, with_bias


def reference_rne(x: np.ndarray, fmt) -> np.ndarray:
    x64 = x.astype(np.float64)
    mag = np.abs(x64)
    exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    quantum = np.exp2(np.maximum(exponent, fmt.emin) - fmt.mantissa_bits)
    value = np.round(x64 / quantum) * quantum
    over = np.abs(value) > fmt.max
    if fmt.overflow == "saturate":
        value = np.where(over, np.copysign(fmt.max, x64), value)
    else:
        value = np.where(over, np.copysign(np.inf, x64) if fmt.overflow == "inf" else np.nan, value)
    return value


CUSTOM = [
    float_format(exponent_bits=4, mantissa_bits=3, bias=9),
    float_format(exponent_bits=4, mantissa_bits=3, bias=4, specials="fn"),
    float_format(exponent_bits=3, mantissa_bits=4, bias=5),
    float_format(exponent_bits=5, mantissa_bits=2, bias=13, specials="none"),
    float_format(exponent_bits=2, mantissa_bits=5, bias=0, specials="none"),
    float_format(exponent_bits=6, mantissa_bits=9, bias=31),
]


@pytest.mark.parametrize("fmt", CUSTOM, ids=lambda f: f.name)
def test_custom_formats_round_like_the_float64_reference(fmt):
    rng = np.random.default_rng(fmt.bits + fmt.bias)
    log2 = rng.uniform(np.log2(fmt.min_subnormal) - 3, np.log2(fmt.max) + 2, 300_000)
    x = (np.exp2(log2) * rng.choice([-1, 1], log2.size)).astype(np.float32)
    codes = np.arange(1 << fmt.bits)
    grid = np.unique(np.abs(decode(codes, fmt)[np.isfinite(decode(codes, fmt))]).astype(np.float64))
    ties = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)
    x = np.concatenate([x, ties, -ties, grid.astype(np.float32)])
    ours = cast(x, fmt, rounding="nearest")
    assert ours.dtype == np.float32
    ref = reference_rne(x, fmt)
    assert np.array_equal(ours, ref.astype(np.float32), equal_nan=True)
    real = ~np.isnan(ours)
    assert np.array_equal(encode(ours[real], fmt), encode(ref[real].astype(np.float32), fmt))


@pytest.mark.parametrize("fields, match", [
    (dict(exponent_bits=8, mantissa_bits=7, bias=100), "largest exponent, 2\\^154, is beyond float32"),
    (dict(exponent_bits=8, mantissa_bits=23, bias=126), "largest exponent, 2\\^128, is beyond float32"),
    (dict(exponent_bits=5, mantissa_bits=10, bias=-200), "largest exponent"),
    (dict(exponent_bits=8, mantissa_bits=23, bias=128), "smallest spacing 2\\^-150 is below float32"),
    (dict(exponent_bits=3, mantissa_bits=4, bias=200), "smallest spacing"),
])
def test_formats_float32_cannot_hold_are_refused(fields, match):
    with pytest.raises(FormatError, match=match):
        float_format(**fields)
    with pytest.raises(FormatError, match=match):
        with_bias(float_format(exponent_bits=fields["exponent_bits"], mantissa_bits=fields["mantissa_bits"]),
                  fields["bias"])


@pytest.mark.parametrize("fields, match", [
    # NaN was written as the Inf code: NaN came back as Inf
    (dict(exponent_bits=2, mantissa_bits=0, bias=1), "need a mantissa bit to tell NaN from Inf"),
    # every exponent code is zero/subnormal or special: min_normal said 2.0 and cast it to inf
    (dict(exponent_bits=1, mantissa_bits=5, bias=0), "has no normal numbers"),
])
def test_formats_that_cannot_keep_their_promises_are_refused(fields, match):
    with pytest.raises(FormatError, match=match):
        float_format(**fields)


def test_the_widest_formats_float32_holds_are_accepted():
    assert float_format(exponent_bits=8, mantissa_bits=23).max == get_format("float32").max
    assert float_format(exponent_bits=8, mantissa_bits=0, bias=127, specials="fn").max == 2.0**127
    assert float_format(exponent_bits=8, mantissa_bits=7, bias=149 - 7 + 1).min_subnormal == 2.0**-149


@pytest.mark.parametrize("bits, signed, match", [
    (7, True, "no signed 7-bit integer type"), (1, True, "no signed 1-bit"),
    (8.0, True, "bits must be an integer"), (8, "yes", "signed must be True or False")])
def test_integer_formats_numpy_cannot_hold_are_refused(bits, signed, match):
    from trnsim.numerics import IntFormat

    with pytest.raises(FormatError, match=match):
        IntFormat(name="custom", bits=bits, signed=signed)
