"""The generic engine (engine.py) against ml_dtypes, bit for bit (reference §3.4-3.5).

Every 16-bit float input, every 8-bit code, and 10 M float32 inputs (random bit patterns, random
values near each format's range, and each format's ties, thresholds and specials).
"""

import numpy as np
import pytest

from trnsim.numerics import cast, decode, encode, get_format

ORACLE_FORMATS = ["bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e3m4",
                  "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu"]
RANDOM_INPUTS = 10_000_000


def oracle_codes(x32: np.ndarray, fmt) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x32.astype(fmt.numpy_dtype).view(fmt.code_dtype).astype(np.uint32)


def comparable(x32: np.ndarray, fmt) -> np.ndarray:
    """Inputs where ml_dtypes defines the answer we also promise (see the two exclusions)."""
    keep = np.ones(x32.shape, bool)
    if fmt.specials == "none":  # ml_dtypes maps NaN to ∓0; we raise instead (tested below)
        keep &= ~np.isnan(x32)
    if fmt.name == "float8_e8m0fnu":  # ml_dtypes quirk: subnormals just above 2^-127 go up
        keep &= ~((np.abs(x32) > 2.0**-127) & (np.abs(x32) < 1.5 * 2.0**-127))
    return x32[keep]


def assert_bit_exact(x32: np.ndarray, fmt) -> None:
    x32 = comparable(x32, fmt)
    ours, ref = encode(x32, fmt), oracle_codes(x32, fmt)
    nan_ref = np.isnan(decode(ref, fmt))
    assert np.array_equal(np.isnan(decode(ours, fmt)), nan_ref)
    bad = np.flatnonzero((ours != ref) & ~nan_ref)
    assert bad.size == 0, (f"{fmt.name}: {bad.size} mismatches, e.g. x={x32[bad[:5]]!r} "
                           f"ours={ours[bad[:5]]} ml_dtypes={ref[bad[:5]]}")


def edge_values(fmt) -> np.ndarray:
    """Every value, every tie between neighbours (and its float32 neighbours), specials."""
    codes = np.arange(1 << min(fmt.bits, 16), dtype=np.uint32)
    values = decode(codes, fmt).astype(np.float64)
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    above_max = finite[-1] + (finite[-1] - finite[-2])  # the next value the format would have
    with np.errstate(over="ignore"):
        return _edge_values(finite, above_max)


def _edge_values(finite, above_max):
    grid = np.append(finite, above_max)
    ties = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)
    near = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)),
                           np.nextafter(ties, np.float32(0)), finite.astype(np.float32),
                           np.float32([above_max, 2 * above_max, finite[0] / 2, finite[0] / 4])])
    specials = np.float32([0.0, np.inf, np.nan, 2.0**-149, 2.0**-126, 3.4e38, 2.0**-127, 1e-45])
    return np.concatenate([near, -near, specials, -specials])


def random_inputs(n: int, seed: int) -> np.ndarray:
    """Half uniform bit patterns (NaNs, Infs, subnormals included), half values of magnitude
    2^-30..2^20 with random mantissas, where the narrow formats round rather than saturate."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint32)
    half = n // 2
    exponent = rng.integers(127 - 30, 127 + 20, size=half, dtype=np.uint32)
    bits[:half] = (bits[:half] & np.uint32(0x807FFFFF)) | (exponent << 23)
    return bits.view(np.float32)


@pytest.fixture(scope="module")
def ten_million():
    return random_inputs(RANDOM_INPUTS, seed=2026)


@pytest.mark.parametrize("name", ORACLE_FORMATS)
def test_random_inputs_bit_exact(name, ten_million):
    assert_bit_exact(ten_million, get_format(name))


@pytest.mark.parametrize("name", ORACLE_FORMATS)
@pytest.mark.parametrize("source", ["bfloat16", "float16"])
def test_every_16_bit_input_bit_exact(name, source):
    inputs = np.arange(1 << 16, dtype=np.uint16).view(get_format(source).numpy_dtype).astype(np.float32)
    assert_bit_exact(inputs, get_format(name))


@pytest.mark.parametrize("name", ORACLE_FORMATS)
def test_ties_thresholds_and_specials_bit_exact(name):
    fmt = get_format(name)
    assert_bit_exact(edge_values(fmt), fmt)


@pytest.mark.parametrize("name", [n for n in ORACLE_FORMATS if get_format(n).bits <= 8])
def test_every_code_decodes_like_ml_dtypes_and_re_encodes_to_itself(name):
    fmt = get_format(name)
    codes = np.arange(1 << fmt.bits, dtype=np.uint32)
    ours = decode(codes, fmt)
    ref = codes.astype(np.uint8).view(fmt.numpy_dtype).astype(np.float32)
    assert np.array_equal(ours, ref, equal_nan=True)
    assert np.array_equal(np.signbit(ours), np.signbit(ref))
    real = ~np.isnan(ours)
    assert np.array_equal(encode(ours[real], fmt), codes[real])


@pytest.mark.parametrize("name, finite, infs, nans", [
    ("float8_e4m3fn", 254, 0, 2), ("float8_e4m3", 240, 2, 14), ("float8_e5m2", 248, 2, 6),
    ("float8_e3m4", 224, 2, 30), ("float8_e8m0fnu", 255, 0, 1), ("float6_e2m3fn", 64, 0, 0),
    ("float6_e3m2fn", 64, 0, 0), ("float4_e2m1fn", 16, 0, 0)])
def test_decode_table_counts(name, finite, infs, nans):
    fmt = get_format(name)
    values = decode(np.arange(1 << fmt.bits), fmt)
    assert (np.isfinite(values).sum(), np.isinf(values).sum(), np.isnan(values).sum()) == (finite, infs, nans)


def test_e8m0_rounds_float32_subnormals_to_the_nearest_power_of_two():
    x = np.float32([1.2 * 2.0**-127, 1.6 * 2.0**-127, 2.0**-130, 0.75, 1.5, 3.0, 0.0, -1.0])
    codes = encode(x, get_format("float8_e8m0fnu"))
    assert codes.tolist() == [0, 1, 0, 127, 128, 129, 255, 255]


def test_fast_path_equals_generic_path(ten_million):
    x = ten_million[:1_000_000]
    for name in ORACLE_FORMATS:
        fmt = get_format(name)
        x_ok = comparable(np.concatenate([x, edge_values(fmt)]), fmt)
        fast = cast(x_ok, fmt, rounding="nearest").view(fmt.code_dtype)
        generic = cast(x_ok, fmt, rounding="nearest", generic=True).view(fmt.code_dtype)
        same = (fast == generic) | np.isnan(decode(generic, fmt))
        assert same.all(), name


def test_tf32_matches_rounding_the_float32_mantissa_to_ten_bits(ten_million):
    x = ten_million[:2_000_000]
    x = x[np.isfinite(x)]
    bits = x.view(np.uint32).astype(np.uint64)
    ref = ((bits + 0xFFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)).astype(np.uint32).view(np.float32)
    ours = cast(x, "tfloat32", rounding="nearest")
    finite = np.isfinite(ref)
    assert np.array_equal(ours[finite], ref[finite])
    assert np.array_equal(ours[~finite], ref[~finite])


@pytest.mark.parametrize("bias", [5, 9, 11])
def test_cfp8_bias_scales_every_value_by_a_power_of_two(bias, ten_million):
    from trnsim.numerics import with_bias

    base = get_format("float8_e4m3")
    shifted = with_bias(base, bias)
    assert shifted.max == base.max * 2.0 ** (base.bias - bias)
    x = ten_million[RANDOM_INPUTS // 2 - 200_000:RANDOM_INPUTS // 2]  # moderate magnitudes
    ours = cast(x, shifted, rounding="nearest")
    assert ours.dtype == np.float32
    scaled = cast(x * np.float32(2.0 ** (bias - base.bias)), base, rounding="nearest").astype(np.float32)
    assert np.array_equal(ours, scaled * np.float32(2.0 ** (base.bias - bias)), equal_nan=True)
