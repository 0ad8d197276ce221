"""Every parameter of every public numerics function, fed bad values: a FormatError naming the
parameter (or a correct result where the value is in fact legal), never numpy's own exception."""

import contextlib
import importlib
import re

import numpy as np
import pytest

from trnsim import ConfigError, FormatError, TrnsimError
from trnsim import numerics as nx

X = np.linspace(-2, 2, 64, dtype=np.float32).reshape(2, 32)
W = nx.prune(np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32), "4:16")
SPARSE = nx.compress(W, "4:16")


def entered_stochastic_seed(seed):
    with nx.stochastic_seed(seed):
        return None


GOOD_CALLS = {  # function: the keyword arguments of one good call
    nx.cast: dict(x=X, fmt="bfloat16", rounding="nearest", seed=0, saturate=None, generic=False),
    nx.as_float32: dict(x=X),
    nx.random_stream: dict(seed=0),
    entered_stochastic_seed: dict(seed=0),
    nx.from_codes: dict(codes=np.arange(4, dtype=np.uint16), fmt=nx.get_format("bfloat16")),
    nx.to_codes: dict(values=X, fmt="bfloat16"),
    nx.encode: dict(x32=X, fmt="float8_e4m3", saturate=False, random_bits=None),
    nx.decode: dict(codes=np.arange(4), fmt="float8_e4m3"),
    nx.float_format: dict(exponent_bits=4, mantissa_bits=3, bias=7, specials="ieee", name=None),
    nx.with_bias: dict(fmt="float8_e4m3", bias=9),
    nx.get_format: dict(spec="bf16"),
    nx.get_mx_format: dict(spec="mxfp8"),
    nx.quantize_mx: dict(x=X, fmt="mxfp8_e4m3", axis=-1, block=32, scale_rule="ocp", rounding="nearest",
                         seed=0),
    nx.dequantize_mx: dict(mx=nx.quantize_mx(X)),
    nx.e8m0_factors: dict(codes=np.arange(4, dtype=np.uint8)),
    nx.pack_x4: dict(values=nx.cast(X, "float8_e4m3fn"), fmt="float8_e4m3fn", axis=-1),
    nx.unpack_x4: dict(packed=np.arange(8, dtype=np.uint32).reshape(2, 4), fmt="float8_e4m3fn", axis=-1),
    nx.get_pattern: dict(spec="4:16"),
    nx.prune: dict(w=W, pattern="4:16", axis=0),
    nx.find_violations: dict(w=W, pattern="4:16", axis=0),
    nx.check_pattern: dict(w=W, pattern="4:16", axis=0),
    nx.compress: dict(w=W, pattern="4:16", axis=0),
    nx.decompress: dict(sparse=SPARSE),
    nx.pack_tags: dict(positions=SPARSE.positions.T, order="low_first"),
    nx.unpack_tags: dict(packed=np.arange(4, dtype=np.uint16), order="low_first"),
    nx.sparse_matmul: dict(a=np.ones((2, 16), np.float32), sparse=SPARSE, max_gather_elements=1 << 24),
}

BAD = {"none": None, "string": "x", "float": 1.5, "negative": -1, "huge": 10**30, "bool": True,
       "ragged": [[1.0], [1.0, 2.0]], "rank3": np.ones((2, 2, 2)), "scalar": np.float32(3),
       "object": object()}

NUMBERS = {"float", "negative", "huge", "bool", "rank3", "scalar"}  # data arrays may legally be these
MAY_ACCEPT = {  # bad-looking values that are legal for a parameter (the call may then succeed)
    "x": NUMBERS, "x32": NUMBERS, "values": NUMBERS, "w": NUMBERS, "a": NUMBERS, "codes": NUMBERS,
    "positions": NUMBERS, "packed": NUMBERS, "seed": {"none", "huge"}, "axis": {"negative"},
    "rounding": {"none"}, "saturate": {"none", "bool"}, "generic": {"bool"}, "bias": {"none", "negative"},
    "name": {"none", "string"}, "random_bits": {"none"}, "max_gather_elements": {"huge"},
}
NAMED_AS = {"fmt": "format", "spec": "format|pattern", "scale_rule": "scale rule", "order": "tag order"}

CASES = [pytest.param(fn, param, bad, id=f"{fn.__name__}-{param}-{bad}")
         for fn, good in GOOD_CALLS.items() for param in good for bad in BAD]


def test_the_good_calls_are_good():
    for fn, good in GOOD_CALLS.items():
        fn(**good)


def test_every_public_function_is_covered():
    covered = {fn.__name__ for fn in GOOD_CALLS} | {"stochastic_seed"}
    functions = {name for name in nx.__all__ if callable(getattr(nx, name)) and name[0].islower()}
    assert functions - covered == {"default_rounding"}  # it has no parameters


@pytest.mark.parametrize("fn, param, bad", CASES)
def test_bad_parameter_is_a_format_error_naming_it(fn, param, bad):
    kwargs = {**GOOD_CALLS[fn], param: BAD[bad]}
    if bad in MAY_ACCEPT.get(param, ()):
        with contextlib.suppress(TrnsimError):  # refusing is fine too; numpy's own errors are not
            fn(**kwargs)
        return
    with pytest.raises(FormatError) as caught:
        fn(**kwargs)
    assert type(caught.value).__module__ == "trnsim.errors"
    assert re.search(NAMED_AS.get(param, re.escape(param)), str(caught.value)), str(caught.value)


@pytest.mark.parametrize("fn, param, value, match", [
    (nx.quantize_mx, "block", 0, "block must be at least 1"),
    (nx.quantize_mx, "axis", 2, "axis 2 does not exist"),
    (nx.quantize_mx, "x", np.float32(1), "axis -1 needs an array with at least one axis"),
    (nx.prune, "axis", 1.0, "axis must be an integer"),
    (nx.pack_tags, "positions", np.array([1, 2, 3, 16]), "positions must lie in 0..15, got 16"),
    (nx.pack_tags, "positions", np.float32([1, 2, 3, 4]), "positions must hold integers"),
    (nx.e8m0_factors, "codes", np.array([256]), "codes must lie in 0..255"),
    (nx.decode, "codes", np.array([256]), "codes must lie in 0..255"),
    (nx.unpack_x4, "packed", np.array([[-1, 0, 0, 0]]), "packed must lie in 0..4294967295, got -1"),
    (nx.encode, "random_bits", np.zeros(3, np.uint64), "random_bits has 3 values for 64 inputs"),
    (nx.cast, "saturate", "yes", "saturate must be True, False or None"),
    (nx.cast, "seed", -1, "seed must be at least 0"),
    (nx.cast, "fmt", None, "does not name a number format"),
    (nx.with_bias, "fmt", "int8", "must be a float format, got the integer format int8"),
])
def test_refusals_say_what_was_wrong(fn, param, value, match):
    with pytest.raises(FormatError, match=match):
        fn(**{**GOOD_CALLS[fn], param: value})


def test_a_negative_seed_in_the_environment_is_a_config_error(monkeypatch):
    cast_module = importlib.import_module("trnsim.numerics.cast")  # the module, not the function
    monkeypatch.setenv(cast_module.SR_SEED_ENV, "-3")
    monkeypatch.setattr(cast_module, "_stream", type(cast_module._stream)("fresh_stream", default=None))
    with pytest.raises(ConfigError, match="not a non-negative integer"):
        nx.random_stream()
