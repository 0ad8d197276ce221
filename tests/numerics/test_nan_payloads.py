"""Every float32 NaN (all 2^23 - 1 payloads, both signs) becomes the engine's NaN on every path.

docs/numerics.md promises that the fast paths equal the generic engine bit for bit; the engine
writes the format's quiet NaN with the input's sign, whatever the payload (numpy's own float16
astype would keep the payload, signalling NaNs included).
"""

import numpy as np
import pytest

from trnsim.numerics import cast, encode, get_format

NAN_FORMATS = ["bfloat16", "float16", "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
               "float8_e3m4"]


@pytest.fixture(scope="module")
def every_nan() -> np.ndarray:
    """Both signs of every payload 1 .. 2^23 - 1: quiet and signalling, every bit position."""
    payloads = np.arange(1, 1 << 23, dtype=np.uint32)
    positive = np.uint32(0x7F800000) | payloads
    return np.concatenate([positive, positive | np.uint32(0x80000000)]).view(np.float32)


def expected_codes(x: np.ndarray, fmt) -> np.ndarray:
    """The quiet NaN with the input's sign bit: what the engine promises."""
    sign_bit = 1 << (fmt.bits - 1)
    return np.where(np.signbit(x), fmt.nan_code | sign_bit, fmt.nan_code).astype(np.uint32)


def codes_of(values: np.ndarray, fmt) -> np.ndarray:
    if fmt.ml_dtypes_name is None:  # held as float32 values: re-encode them
        return encode(values, fmt)
    return values.view(fmt.code_dtype).astype(np.uint32)


def test_the_engine_writes_the_quiet_nan_with_the_sign(every_nan):
    sample = every_nan[::997]
    for name in NAN_FORMATS:
        fmt = get_format(name)
        assert np.array_equal(encode(sample, fmt), expected_codes(sample, fmt)), name


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_every_nan_through_the_astype_fast_path(name, every_nan):
    fmt = get_format(name)
    assert np.array_equal(codes_of(cast(every_nan, fmt, rounding="nearest"), fmt),
                          expected_codes(every_nan, fmt))


@pytest.mark.parametrize("name", NAN_FORMATS)
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("saturate", [False, True])
def test_nan_payload_classes_on_every_path(name, rounding, saturate, every_nan):
    """Every 61st payload (all bit positions, quiet and signalling) mixed into ordinary values."""
    fmt = get_format(name)
    nans = every_nan[::61]
    x = np.empty(2 * nans.size, np.float32)
    x[0::2], x[1::2] = nans, np.linspace(-3, 3, nans.size, dtype=np.float32)
    out = codes_of(cast(x, fmt, rounding=rounding, seed=0, saturate=saturate), fmt)
    assert np.array_equal(out[0::2], expected_codes(nans, fmt))


@pytest.mark.parametrize("generic", [False, True])
@pytest.mark.parametrize("saturate", [False, True])
def test_the_float32_target_writes_the_quiet_nan_and_keeps_every_other_bit(generic, saturate, every_nan):
    """float32 -> float32 drops no bits, but a NaN still becomes the engine's quiet NaN (a signalling
    0x7f800001 used to come back unchanged, generic=True included)."""
    fmt = get_format("float32")
    nans = every_nan[::997]
    others = np.float32([0.0, -0.0, 1.5, -2.0**-149, 2.0**-126, 3.4e38, -np.inf])
    out = cast(np.concatenate([nans, others]), fmt, saturate=saturate, generic=generic)
    assert np.array_equal(out[:nans.size].view(np.uint32), expected_codes(nans, fmt))
    expected = np.clip(others, -fmt.max, fmt.max) if saturate else others
    assert np.array_equal(out[nans.size:].view(np.uint32), expected.view(np.uint32))
