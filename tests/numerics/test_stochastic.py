"""Stochastic rounding: unbiased, only ever the two neighbours, reproducible, and it matters
(reference §1.5 and §4)."""

import numpy as np
import pytest

from trnsim.numerics import cast, decode, get_format, random_stream, stochastic_seed, to_codes

SR_FORMATS = ["bfloat16", "tfloat32", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
              "float8_e3m4", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]
DRAWS = 100_000


def values_across_range(fmt, count: int, seed: int) -> np.ndarray:
    """Non-representable float32 values spread log-uniformly from the subnormals to near max."""
    rng = np.random.default_rng(seed)
    log2 = rng.uniform(np.log2(fmt.min_subnormal), np.log2(fmt.max) - 0.1, count)
    x = (np.exp2(log2) * rng.choice([-1, 1], count)).astype(np.float32)
    representable = cast(x, fmt, rounding="nearest").astype(np.float32) == x
    return x[~representable]


@pytest.mark.parametrize("generic", [False, True])
@pytest.mark.parametrize("name", SR_FORMATS)
def test_mean_error_is_zero_within_four_standard_errors(name, generic):
    fmt = get_format(name)
    for i, x in enumerate(values_across_range(fmt, 12, seed=len(name))):
        draws = cast(np.full(DRAWS, x), fmt, rounding="stochastic", seed=i, generic=generic)
        error = draws.astype(np.float64) - np.float64(x)
        standard_error = error.std() / np.sqrt(DRAWS)
        assert standard_error > 0, (name, x)
        assert abs(error.mean()) < 4 * standard_error, (name, x, error.mean(), standard_error)


def neighbours(x: np.ndarray, fmt) -> tuple[np.ndarray, np.ndarray]:
    """The representable values just below and just above |x| (by magnitude), with x's sign."""
    codes = to_codes(cast(x, fmt, rounding="nearest"), fmt).astype(np.int64)
    sign = (codes >> (fmt.exponent_bits + fmt.mantissa_bits)) << (fmt.exponent_bits + fmt.mantissa_bits)
    mag = codes - sign
    nearest = np.abs(decode(codes, fmt))
    below = np.where(nearest > np.abs(x), mag - 1, mag)
    return decode(sign | below, fmt), decode(sign | (below + 1), fmt)


@pytest.mark.parametrize("name", SR_FORMATS)
def test_results_are_only_the_two_neighbours_and_representables_stay(name):
    fmt = get_format(name)
    x = values_across_range(fmt, 200, seed=7)
    low, high = neighbours(x, fmt)
    assert np.all(np.abs(low) < np.abs(x)) and np.all(np.abs(x) < np.abs(high))
    draws = cast(np.repeat(x, 50), fmt, rounding="stochastic", seed=3).astype(np.float32).reshape(-1, 50)
    assert np.all((draws == low[:, None]) | (draws == high[:, None]))
    exact = cast(x, fmt, rounding="nearest")
    again = cast(exact.astype(np.float32), fmt, rounding="stochastic", seed=1)
    assert np.array_equal(again.astype(np.float32), exact.astype(np.float32))


def test_probability_of_rounding_up_is_the_distance_fraction():
    # 1 + 0.3 ulp in bf16: P(up) = 0.3 (reference §4, test 1)
    x = np.float32(1 + 0.3 * 2**-7)
    draws = cast(np.full(200_000, x), "bfloat16", rounding="stochastic", seed=11).astype(np.float64)
    p_hat = np.mean(draws > 1)
    z = (p_hat - 0.3) / np.sqrt(0.3 * 0.7 / draws.size)
    assert abs(z) < 4
    assert set(np.unique(draws)) == {1.0, 1 + 2**-7}


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3", "float4_e2m1fn", "tfloat32"])
def test_same_seed_same_bits_other_seed_other_bits(name):
    x = np.random.default_rng(0).standard_normal(3_000_000).astype(np.float32)
    a = cast(x, name, rounding="stochastic", seed=5).view(np.uint8)
    b = cast(x, name, rounding="stochastic", seed=5).view(np.uint8)
    c = cast(x, name, rounding="stochastic", seed=6).view(np.uint8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def fp16_accumulate(rounding: str, runs: int) -> np.ndarray:
    """The Neuron doc's quick test: 1024 + 0.5, 2048 times, in FP16 (reference §1.5)."""
    acc = np.full(runs, 1024.0, np.float32)
    with stochastic_seed(2024):
        for _ in range(2048):
            acc = cast(acc + np.float32(0.5), "float16", rounding=rounding).astype(np.float32)
    return acc


def test_fp16_accumulation_rne_stalls_and_sr_reaches_the_true_sum():
    assert fp16_accumulate("nearest", 4).tolist() == [1024.0] * 4
    sr = fp16_accumulate("stochastic", 400)
    assert abs(sr.mean() - 2048) < 4 * 22.6 / np.sqrt(400)
    assert 18 < sr.std() < 28  # theory: 22.6


def test_bf16_small_increments_rne_loses_them_sr_keeps_them():
    acc_rne = np.ones(1, np.float32)
    acc_sr = np.ones(500, np.float32)
    with stochastic_seed(1):
        for _ in range(1000):
            acc_rne = cast(acc_rne + np.float32(0.001), "bfloat16", rounding="nearest").astype(np.float32)
            acc_sr = cast(acc_sr + np.float32(0.001), "bfloat16", rounding="stochastic").astype(np.float32)
    assert acc_rne.tolist() == [1.0]
    assert abs(acc_sr.mean() - 2.0) < 4 * 0.085 / np.sqrt(500)


def test_environment_switch_and_seed_are_the_defaults(monkeypatch):
    x = np.full(10_000, np.float32(1 + 2**-9))
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_SEED", "77")
    with stochastic_seed(77):
        first = cast(x, "bfloat16").astype(np.float32)
    assert len(np.unique(first)) == 2
    assert np.array_equal(first, cast(x, "bfloat16", seed=random_stream(77)).astype(np.float32))
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "0")
    assert np.unique(cast(x, "bfloat16").astype(np.float32)).tolist() == [1.0]


def test_bad_environment_switch_is_a_config_error(monkeypatch):
    from trnsim import ConfigError

    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "maybe")
    with pytest.raises(ConfigError, match="NEURON_RT_STOCHASTIC_ROUNDING_EN"):
        cast([1.0], "bfloat16")


def test_stochastic_saturation_and_specials():
    x = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e6, -1e6, 239.0])
    y = cast(x, "float8_e4m3", rounding="stochastic", seed=0).astype(np.float32)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == -np.inf
    assert y[3] == 0 and np.signbit(y[4]) and y[5] == np.inf and y[6] == -np.inf
    s = cast(x[1:], "float8_e4m3", rounding="stochastic", seed=0, saturate=True).astype(np.float32)
    assert s.tolist()[:6] == [240.0, -240.0, 0.0, 0.0, 240.0, -240.0]
    assert decode(np.uint32([0x7C]), get_format("float8_e4m3"))[0] != decode(np.uint32([0x78]),
                                                                              get_format("float8_e4m3"))[0]


def test_stochastic_to_int_is_unbiased():
    draws = cast(np.full(DRAWS, 2.25), "int8", rounding="stochastic", seed=3).astype(np.float64)
    assert set(np.unique(draws)) == {2.0, 3.0}
    assert abs(draws.mean() - 2.25) < 4 * draws.std() / np.sqrt(DRAWS)


@pytest.mark.parametrize("name", ["bfloat16", "tfloat32", "float16", "float8_e4m3", "float8_e4m3fn"])
def test_every_nan_payload_stays_nan_under_stochastic_rounding(name):
    # payloads only in the low bits, or all ones, are where adding random bits could carry wrongly
    nans = np.uint32([0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000]).view(np.float32)
    y = cast(np.tile(nans, 20_000), name, rounding="stochastic", seed=0).astype(np.float32)
    assert np.isnan(y).all()
