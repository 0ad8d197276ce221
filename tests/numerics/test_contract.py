"""The API other areas code against: get_format names/aliases/dtypes and cast's defaults."""

import warnings

import ml_dtypes
import numpy as np
import pytest

from trnsim import FormatError, numerics

CANONICAL = ["float32", "tfloat32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn",
             "float8_e5m2", "float8_e3m4", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
             "float8_e8m0fnu", "int8", "uint8", "int16", "uint16", "int32", "uint32", "bool_"]


@pytest.mark.parametrize("name", CANONICAL)
def test_canonical_names_round_trip(name):
    fmt = numerics.get_format(name)
    assert fmt.name == name
    assert numerics.get_format(fmt.numpy_dtype) is fmt or fmt.name in ("tfloat32",)


def test_aliases_and_dtypes():
    assert numerics.get_format("BF16").name == "bfloat16"
    assert numerics.get_format("fp8_e4m3").max == 240
    assert numerics.get_format(ml_dtypes.float8_e4m3fn).max == 448
    assert numerics.get_format(np.float16).max == 65504
    assert numerics.get_format(np.dtype("int8")).min == -128
    overflow = {n: numerics.get_format(n).overflow for n in ("float8_e4m3", "float8_e4m3fn", "float4_e2m1fn")}
    assert overflow == {"float8_e4m3": "inf", "float8_e4m3fn": "nan", "float4_e2m1fn": "saturate"}


def test_torch_dtypes_without_importing_torch_in_numerics():
    torch = pytest.importorskip("torch")
    assert numerics.get_format(torch.bfloat16).name == "bfloat16"
    assert numerics.get_format(torch.float8_e4m3fn).name == "float8_e4m3fn"
    assert numerics.get_format(torch.bool).name == "bool_"


def test_unknown_format_is_a_format_error():
    with pytest.raises(FormatError, match="unknown number format 'float7'"):
        numerics.get_format("float7")
    with pytest.raises(FormatError, match="does not name a number format"):
        numerics.get_format(3.5)


def test_cast_returns_the_format_dtype_and_rounds_to_nearest_even():
    y = numerics.cast([257.0, 259.0, 1.0], "bfloat16", rounding="nearest")
    assert y.dtype == ml_dtypes.bfloat16
    assert y.astype(np.float32).tolist() == [256.0, 260.0, 1.0]
    assert numerics.cast([1.0 + 2**-11], "tf32").dtype == np.float32
    assert numerics.cast([1.0 + 2**-11], "tf32").tolist() == [1.0]
    assert numerics.cast([1.0 + 3 * 2**-11], "tf32").tolist() == [1.0 + 2**-9]


def test_float_to_int_rounds_half_even_saturates_and_maps_nan_to_zero():
    y = numerics.cast([0.5, 1.5, 2.5, -2.5, 300.0, -300.0, np.nan, np.inf], "int8")
    assert y.dtype == np.int8
    assert y.tolist() == [0, 2, 2, -2, 127, -128, 0, 127]
    assert numerics.cast([70000, -5], "uint16").tolist() == [65535, 0]


def test_non_numeric_input_is_a_format_error():
    with pytest.raises(FormatError, match="not a real number type"):
        numerics.cast(np.array(["a"]), "bfloat16")
    with pytest.raises(FormatError, match="unknown rounding"):
        numerics.cast([1.0], "bfloat16", rounding="up")


def test_empty_and_scalar_inputs_keep_their_shape():
    for name in ("bfloat16", "float8_e4m3", "float4_e2m1fn", "tfloat32", "int8", "float8_e8m0fnu"):
        for rounding in ("nearest", "stochastic"):
            assert numerics.cast(np.zeros((0, 3), np.float32), name, rounding=rounding).shape == (0, 3)
            assert numerics.cast(np.float32(3.3), name, rounding=rounding, seed=1).shape == ()
    mx = numerics.quantize_mx(np.zeros((0, 32), np.float32))
    assert numerics.dequantize_mx(mx).shape == (0, 32)
    packed = numerics.pack_x4(mx.elements, "float8_e4m3fn")
    assert numerics.unpack_x4(packed, "float8_e4m3fn").shape == (0, 32)
    sparse = numerics.compress(np.zeros((0, 16)), "4:16", axis=1)
    assert numerics.decompress(sparse).shape == (0, 16)


@pytest.mark.parametrize("name, options", [
    ("float32", {}), ("float32", dict(saturate=True)), ("bfloat16", {}), ("int8", {}), ("bool_", {}),
    ("uint16", dict(rounding="stochastic")),
])
def test_zero_d_input_gives_a_zero_d_ndarray(name, options):
    """numpy ufuncs turn 0-d arrays into scalars; cast promises an ndarray of the format's dtype."""
    y = numerics.cast(np.float32(1.5), name, seed=0, **options)
    assert type(y) is np.ndarray and y.shape == () and y.dtype == numerics.get_format(name).numpy_dtype


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2])
def test_ml_dtypes_narrow_ints_are_read_exactly(dtype):
    info = ml_dtypes.iinfo(dtype)
    x = np.array([info.min, 1, info.max], dtype)
    assert numerics.cast(x, "bfloat16").astype(np.float32).tolist() == [info.min, 1, info.max]
    assert numerics.cast(x, "int8").tolist() == [info.min, 1, info.max]


def test_a_float64_signalling_nan_casts_without_a_numpy_warning():
    snan = np.array([0x7FF0000000000001], np.uint64).view(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = numerics.cast(snan, "bfloat16")
    assert np.isnan(y.astype(np.float32)).all()
