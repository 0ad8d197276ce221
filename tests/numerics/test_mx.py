"""MX block formats: the reference's vectors, scale rules, special blocks, round trips, x4 packing."""

import numpy as np
import pytest

from trnsim import FormatError
from trnsim.numerics import cast, get_format
from trnsim.numerics.mx import MX_FORMATS, MXArray, dequantize_mx, pack_x4, quantize_mx, unpack_x4

# microsoft/microxcaling mx/tests/test_fp8_e4m3_fix.py::test_mxfp8_e4m3_round (reference §3.5.5)
MXFP8_INPUT = [
    -0.582733273506, -0.256973713636, 0.506033003330, 0.400039970875, -0.437093466520, 1.275019764900,
    -2.123294353485, 1.514909625053, -2.660086154938, -0.200791791081, -0.060985822231, -0.209203109145,
    2.385987281799, 0.062245476991, 0.217003762722, -0.857734560966, 0.507945835590, 0.896152675152,
    -0.751049160957, -0.488164335489, 0.805381953716, -0.172028362751, 0.271137863398, -0.503807783127,
    1.879478693008, -0.294227510691, 0.968807995319, 0.670037031174, -0.871595799923, 0.304561793804,
    -0.567594051361, -1.265962004662]
MXFP8_EXPECTED = [
    -0.5625, -0.25, 0.5, 0.40625, -0.4375, 1.25, -2.0, 1.5, -2.75, -0.203125, -0.0625, -0.203125, 2.5,
    0.0625, 0.21875, -0.875, 0.5, 0.875, -0.75, -0.5, 0.8125, -0.171875, 0.28125, -0.5, 1.875, -0.28125,
    1.0, 0.6875, -0.875, 0.3125, -0.5625, -1.25]


def test_mxfp8_e4m3_reference_block():
    mx = quantize_mx(np.float32(MXFP8_INPUT), "mxfp8_e4m3")
    assert mx.scales.view(np.uint8).tolist() == [120]
    assert dequantize_mx(mx).tolist() == MXFP8_EXPECTED


def test_e4m3_clamp_block_rounds_400_to_384_under_rne():
    x = np.float32([485, 475, 400, -485, -475, -450, 2**-6, -(2**-6)])
    mx = quantize_mx(x, "mxfp8_e4m3", block=8)
    assert mx.scale_exponents.tolist() == [0]
    assert dequantize_mx(mx).tolist() == [448, 448, 384, -448, -448, -448, 2**-6, -(2**-6)]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_anywhere_makes_the_whole_block_nan(bad):
    x = np.ones((2, 32), np.float32)
    x[1, 5] = bad
    mx = quantize_mx(x, "mxfp4_e2m1")
    assert mx.scales.view(np.uint8)[:, 0].tolist() == [127 - 2, 0xFF]  # 1.0 = 4 * 2^-2
    out = dequantize_mx(mx)
    assert np.all(out[0] == 1) and np.all(np.isnan(out[1]))


def test_all_zero_block_gets_the_smallest_scale():
    mx = quantize_mx(np.zeros((3, 64), np.float32), "mxfp8_e5m2")
    assert np.all(mx.scales.view(np.uint8) == 0)
    assert np.all(dequantize_mx(mx) == 0)


@pytest.mark.parametrize("k", [-3, 0, 5])
def test_scale_rule_discriminators(k):
    # amax = 1.875 * 2^k in E4M3: OCP clamps the largest element, round-up and trainium do not
    x = np.full(32, 0.5 * 2.0**k, np.float32)
    x[0] = 1.875 * 2.0**k
    got = {rule: quantize_mx(x, "mxfp8_e4m3", scale_rule=rule) for rule in ("ocp", "round_up", "trainium")}
    assert got["ocp"].scale_exponents.tolist() == [k - 8]
    assert dequantize_mx(got["ocp"])[0] == 448 * 2.0 ** (k - 8)  # clamped: 480 -> 448
    assert dequantize_mx(got["round_up"])[0] == x[0]
    assert dequantize_mx(got["trainium"])[0] == x[0]
    assert got["trainium"].scale_exponents.tolist() == [k - 7]
    # amax = 1.0 * 2^k: round-up and OCP agree on 2^(k-8), trainium picks 2^(k-7)
    y = np.full(32, 2.0**k, np.float32)
    exps = {rule: quantize_mx(y, "mxfp8_e4m3", scale_rule=rule).scale_exponents.tolist()
            for rule in ("ocp", "round_up", "trainium")}
    assert exps == {"ocp": [k - 8], "round_up": [k - 8], "trainium": [k - 7]}


@pytest.mark.parametrize("name", list(MX_FORMATS))
@pytest.mark.parametrize("rule", ["ocp", "round_up", "trainium"])
def test_quantisation_error_is_within_half_an_element_step(name, rule):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((16, 128)) * np.exp2(rng.integers(-20, 20, (16, 1)))).astype(np.float32)
    mx = quantize_mx(x, name, axis=1, scale_rule=rule)
    fmt = mx.format
    back = dequantize_mx(mx)
    scale = np.repeat(np.exp2(mx.scale_exponents.astype(np.float64)), 32, axis=1)
    step = scale * (2.0**-6 if fmt.element is None else 2.0 ** (fmt.emax - fmt.element.mantissa_bits))
    clamp = np.abs(x) - fmt.max_element * scale  # only OCP may clamp the block's largest values
    err = np.abs(back.astype(np.float64) - x)
    assert np.all((err <= step / 2 * (1 + 1e-6)) | (clamp > 0))
    if rule != "trainium":  # its block max may round up to the next power of two, moving the scale
        exact = dequantize_mx(quantize_mx(back, name, axis=1, scale_rule=rule))
        assert np.array_equal(exact, back)  # quantised values quantise to themselves


def test_elements_are_ordinary_format_values_and_axis_moves():
    x = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)
    mx = quantize_mx(x, "mxfp6_e3m2", axis=0)
    assert mx.elements.shape == (64, 8) and mx.scales.shape == (2, 8)
    assert mx.elements.dtype == get_format("float6_e3m2fn").numpy_dtype
    assert np.array_equal(dequantize_mx(mx), dequantize_mx(quantize_mx(x.T, "mxfp6_e3m2", axis=1)).T)


def test_mxint8_never_writes_minus_128():
    x = np.full(32, -1.0, np.float32)
    x[0] = -1.999  # scale 2^0, so -1.999 * 64 rounds to -128, which MXINT8 clamps to -127
    mx = quantize_mx(x, "mxint8")
    assert mx.elements.min() == -127


def test_stochastic_mx_is_unbiased_on_average():
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    draws = np.stack([dequantize_mx(quantize_mx(x, "mxfp4_e2m1", rounding="stochastic", seed=s))
                      for s in range(400)])
    assert np.abs(draws.mean(axis=0) - x).max() < 0.1


@pytest.mark.parametrize("bad, match", [
    (dict(x=np.ones(40, np.float32)), "block size 32 does not divide axis 0 of length 40"),
    (dict(x=np.ones(32, np.int32)), "needs float input"),
    (dict(x=np.ones(32, np.float32), fmt="mxfp5"), "unknown MX format"),
    (dict(x=np.ones(32, np.float32), scale_rule="ceil"), "unknown MX scale rule"),
])
def test_bad_input_is_a_format_error(bad, match):
    with pytest.raises(FormatError, match=match):
        quantize_mx(**bad)


MALFORMED_MX_FIELDS = [  # field: a value that does not fit an MXArray of X_4x64 (4 x 64, axis 1)
    ("scales", np.ones((4, 1), np.uint8), r"scales has shape \(4, 1\).*need one scale per block: \(4, 2\)"),
    ("scales", np.zeros((4, 2), np.float32), "scales must be E8M0 codes"),
    ("block", 0, "block must be at least 1"),
    ("block", 3, "block size 3 does not divide axis 1"),
    ("axis", 5, "axis 5 does not exist"),
    ("format", "mxfp8_e4m3", "format must be an MXFormat"),
    ("elements", [[0.0] * 64] * 4, "elements must be a numpy array"),
    ("elements", np.zeros((4, 64), np.float32), "elements of mxfp8_e4m3 must have dtype float8_e4m3fn"),
]


@pytest.mark.parametrize("field, value, match", MALFORMED_MX_FIELDS)
def test_a_malformed_mx_array_is_refused_naming_the_field(field, value, match):
    """A scale array one block short used to broadcast its first scale over the whole row."""
    good = quantize_mx(np.ones((4, 64), np.float32))
    fields = dict(format=good.format, elements=good.elements, scales=good.scales, axis=1, block=32)
    with pytest.raises(FormatError, match=match):
        MXArray(**{**fields, field: value})
    assert np.array_equal(dequantize_mx(MXArray(**fields)), np.ones((4, 64), np.float32))


@pytest.mark.parametrize("name, word, bits", [("float8_e4m3fn", np.uint32, 8), ("float8_e5m2", np.uint32, 8),
                                              ("float4_e2m1fn", np.uint16, 4)])
def test_x4_packing_puts_element_zero_in_the_low_bits(name, word, bits):
    values = cast(np.float32([[1, 2, 3, 4, 0.5, -1, -2, -3]]), name)
    packed = pack_x4(values, name)
    assert packed.dtype == word and packed.shape == (1, 2)
    codes = values.view(np.uint8).astype(np.uint32)
    assert int(packed[0, 0]) == sum(int(c) << (bits * i) for i, c in enumerate(codes[0, :4]))
    assert np.array_equal(unpack_x4(packed, name).view(np.uint8), values.view(np.uint8))
    with pytest.raises(FormatError, match="divisible by 4"):
        pack_x4(values[:, :6], name)
    with pytest.raises(FormatError, match="no x4 packed type"):
        pack_x4(values, "bfloat16")
