"""The reference's concrete vectors (reference/numerics.md §1.4, §3.4-3.5) through the public cast."""

import warnings

import numpy as np
import pytest

from trnsim import FormatError
from trnsim.numerics import cast, float_format, get_format, to_codes


@pytest.mark.parametrize("generic", [False, True])
def test_fp4_e2m1_ties_go_to_even_and_overflow_saturates(generic):
    x = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, np.inf]
    expected = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0]
    for sign in (1, -1):
        y = cast(np.float32(x) * sign, "float4_e2m1fn", rounding="nearest", generic=generic)
        assert (y.astype(np.float32) * sign).tolist() == expected


@pytest.mark.parametrize("generic", [False, True])
def test_fp6_e3m2_rounding_codes(generic):
    y = cast(np.float32([29.0, 26.0, 0.1251, 0.0314, 0.03]), "float6_e3m2fn", rounding="nearest",
             generic=generic)
    assert to_codes(y, "float6_e3m2fn").tolist() == [0b011111, 0b011110, 0b000010, 0b000001, 0]


@pytest.mark.parametrize("name, below, at, inf_from", [
    ("float8_e4m3fn", 448.0, 464.0, 464.5), ("float8_e4m3", 240.0, 247.9, 248.0),
    ("float8_e5m2", 57344.0, 61439.0, 61440.0), ("float8_e3m4", 15.5, 15.74, 15.75)])
@pytest.mark.parametrize("generic", [False, True])
def test_overflow_thresholds_and_explicit_saturation(name, below, at, inf_from, generic):
    fmt = get_format(name)
    y = cast(np.float32([at, inf_from, -inf_from, np.inf]), fmt, rounding="nearest", generic=generic)
    y = y.astype(np.float32)
    assert y[0] == below
    if fmt.has_inf:
        assert y[1:].tolist() == [np.inf, -np.inf, np.inf]
    else:
        assert np.isnan(y[1:]).all()
    s = cast(np.float32([inf_from, -inf_from, np.inf, -np.inf, 1e30]), fmt, rounding="nearest",
             saturate=True, generic=generic).astype(np.float32)
    assert s.tolist() == [below, -below, below, -below, below]


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("generic", [False, True])
def test_nan_into_a_format_without_nan_is_an_error_naming_where(generic, rounding):
    """Stochastic rounding named index (0,) whatever the place (it checked a chunk of the input)."""
    x = np.zeros((2, 3), np.float32)
    x[1, 2] = np.nan
    with pytest.raises(FormatError, match=r"float4_e2m1fn has no NaN.*index \(1, 2\)"):
        cast(x, "float4_e2m1fn", rounding=rounding, seed=0, generic=generic)


def test_negative_zero_and_nan_keep_their_sign():
    y = cast(np.float32([-0.0, -np.nan, np.nan]), "float8_e4m3", rounding="nearest")
    assert to_codes(y, "float8_e4m3").tolist() == [0x80, 0xFC, 0x7C]


def test_bf16_256_plus_1_is_256():
    one = cast([1.0], "bfloat16")
    acc = cast([256.0], "bfloat16")
    assert cast(acc.astype(np.float32) + one.astype(np.float32), "bfloat16").astype(float).tolist() == [256.0]


def test_summing_10000_uniforms_fp32_accumulation_vs_bf16_accumulation():
    values = cast(np.random.default_rng(0).random(10_000, dtype=np.float32), "bfloat16", rounding="nearest")
    values = values.astype(np.float32)
    fp32_sum = np.float32(0)
    for v in values:  # sequential, like PSUM accumulating one product at a time
        fp32_sum = np.float32(fp32_sum + v)
    assert abs(fp32_sum - 5000) < 150  # the reference's run gave ≈ 4992
    bf16_sum = np.zeros(1, np.float32)
    for v in values:
        bf16_sum = cast(bf16_sum + v, "bfloat16", rounding="nearest").astype(np.float32)
    assert bf16_sum.tolist() == [256.0]


def test_int_casts_saturate_and_accept_every_int_width():
    big = np.array([2**40, -(2**40), 5], np.int64)
    assert cast(big, "int32").tolist() == [2**31 - 1, -(2**31), 5]
    assert cast(big, "uint32").tolist() == [2**32 - 1, 0, 5]
    assert cast([0.0, 2.0, np.nan], "bool_").tolist() == [False, True, True]
    assert cast(np.float32([65535.5, 65536.5]), "uint16").tolist() == [65535, 65535]
    assert cast(np.float32([-32768.5, 32767.5]), "int16").tolist() == [-32768, 32767]


SATURATING_TARGETS = ["float32", "tfloat32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn",
                      "float8_e5m2", "float6_e2m3fn", "float4_e2m1fn"]


@pytest.mark.parametrize("name", SATURATING_TARGETS)
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_saturate_clamps_inf_and_float64_overflow_for_every_float_target(name, rounding):
    """float32 included: ±Inf and float64 values beyond float32's range become ±max, not ±Inf."""
    fmt = get_format(name)
    x = np.array([np.inf, -np.inf, 1e300, -1e300, 3.5e38, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the float64 -> float32 step overflows by definition
        y = cast(x, fmt, rounding=rounding, saturate=True, seed=0).astype(np.float64)
    assert y.tolist() == [fmt.max, -fmt.max, fmt.max, -fmt.max, fmt.max, 1.0]


def test_float32_target_keeps_inf_without_saturate():
    assert cast([np.inf, 1e300], "float32").tolist() == [np.inf, np.inf]


def test_custom_format_with_float32_mantissa_still_rounds_its_range():
    """23 mantissa bits but 5 exponent bits: not float32, so values beyond its max overflow."""
    fmt = float_format(exponent_bits=5, mantissa_bits=23)
    y = cast(np.float32([1e6, 1.0 + 2**-23, -1e6]), fmt, saturate=None)
    assert y.tolist() == [np.inf, 1.0 + 2**-23, -np.inf]
    assert cast(np.float32([1e6]), fmt, saturate=True).tolist() == [fmt.max]
