"""The instruction contract, tested as a property: random instructions with random shapes,
dtypes and arguments, legal and illegal, either raise a TrnsimError that names the kernel line or
give exactly what numpy gives; trace-only and value runs refuse the same instructions; nothing
else ever escapes.

Inputs are small multiples of 1/2, so every sum and product below is exact in fp32 and the
reference needs no tolerance. The operations drawn are the ones with an exact numpy reference;
the other opcodes have their refusals tested one by one in test_contract_shapes.py.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import TrnsimError

TARGETS = ("trn1", "trn2", "trn3")
TILE_DTYPES = ("float32", "bfloat16", "float16", "int32", "float8_e4m3fn", "float64")
KERNEL_LINE = "test_contract_property.py:"
_NUMPY = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "int32": np.int32,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn}
_ALU = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
        "minimum": np.minimum}
_REDUCE = {"add": np.add, "subtract": np.subtract, "maximum": np.maximum, "minimum": np.minimum}
_ACTIVATIONS = {"copy": lambda x: x, "relu": lambda x: np.maximum(x, np.float32(0)), "exp": np.exp}
JUNK = (None, "x", 1e39, float("nan"), np.ones(3, np.float32), (1, 2), object())
"""Values that are never a tile, an operator or a well-formed immediate."""


# --- what one drawn instruction looks like ------------------------------------------------------
def _sizes(draw):
    partitions = draw(st.sampled_from((1, 8, 32, 64, 128, 129)))
    free = draw(st.sampled_from((1, 4, 32, 512, 513)))
    return partitions, free


def _dtype(draw):
    """Mostly a float dtype every generation has; sometimes one a generation lacks, or no dtype."""
    choices = TILE_DTYPES[:3] if draw(st.floats(0, 1)) < 0.85 else TILE_DTYPES
    return draw(st.sampled_from(choices))


def _maybe(draw, good, bad=JUNK, bad_odds=0.15):
    """Mostly a legal value, sometimes one of the bad ones."""
    return draw(st.sampled_from(bad)) if draw(st.floats(0, 1)) < bad_odds else good


def _operator(draw, legal, wrong_kind):
    """An operator from `legal`, spelled nl.add or "add"; sometimes one of another kind or none."""
    spelled = draw(st.sampled_from(legal))
    spelling = draw(st.sampled_from(("nl", "str")))
    good = getattr(nl, spelled) if spelling == "nl" else spelled
    return _maybe(draw, good, bad=(wrong_kind, "bogus", None, 3, len))


@st.composite
def instructions(draw):
    """(target, case): the operation, operand shapes/dtypes/places and its keyword arguments."""
    target = draw(st.sampled_from(TARGETS))
    op = draw(st.sampled_from(("tensor_copy", "tensor_tensor", "tensor_scalar", "activation",
                               "tensor_reduce", "memset", "nc_transpose", "nc_matmul", "reciprocal",
                               "tensor_partition_reduce", "scalar_tensor_tensor")))
    partitions, free = _sizes(draw)
    dtype, dst_dtype = _dtype(draw), _dtype(draw)
    case = {"op": op, "data": (partitions, free), "dtype": dtype, "dst_dtype": dst_dtype,
            "dst": (partitions, free), "column": (partitions, 1), "kwargs": {}, "dst_buffer": "sbuf",
            "engine": None, "start": draw(st.sampled_from((0, 0, 0, 16, 32, 64)))}
    kwargs = case["kwargs"]
    if op == "tensor_tensor":
        kwargs["op"] = _operator(draw, tuple(_ALU), "rsqrt")
        case["data2"] = draw(st.sampled_from(((partitions, free), (partitions, max(1, free // 2)))))
    elif op == "tensor_scalar":
        kwargs["op0"] = _operator(draw, tuple(_ALU), "exp")  # rsqrt, like nl.abs, is a legal unary op0
        kwargs["operand0"] = _maybe(draw, draw(st.sampled_from((1.5, -2.0, np.float32(0.5), "column"))),
                                    bad=JUNK + ("column11",))
        kwargs["reverse0"] = _maybe(draw, draw(st.booleans()), bad=("False", None, 2))
    elif op == "activation":
        kwargs["op"] = _operator(draw, tuple(_ACTIVATIONS), "subtract")
        kwargs["scale"] = _maybe(draw, draw(st.sampled_from((1.0, 0.5, -2.0))))
        kwargs["bias"] = _maybe(draw, draw(st.sampled_from((None, "column", 1.5))), bad=("column11", "x"))
    elif op == "scalar_tensor_tensor":
        kwargs["op0"] = _operator(draw, tuple(_ALU), "rsqrt")
        kwargs["operand0"] = _maybe(draw, draw(st.sampled_from((1.5, "column"))), bad=JUNK + ("column11",))
        kwargs["op1"] = _operator(draw, tuple(_ALU), "exp")
        kwargs["reverse1"] = draw(st.booleans())
        case["data2"] = draw(st.sampled_from(((partitions, free), (partitions, free), (1, free))))
    elif op == "tensor_partition_reduce":
        kwargs["op"] = _operator(draw, ("add", "maximum", "minimum"), "divide")
        case["dst"] = draw(st.sampled_from(((1, free), (1, free), (partitions, 1))))
    elif op == "tensor_reduce":
        kwargs["op"] = _operator(draw, ("add", "maximum", "minimum"), "subtract")
        kwargs["axis"] = _maybe(draw, draw(st.sampled_from((1, -1))), bad=(0, 2, 5, -3, "x", None, 1.0))
        case["dst"] = (partitions, 1)
    elif op == "memset":
        kwargs["value"] = _maybe(draw, draw(st.sampled_from((0.0, 1.5, -3))), bad=JUNK[:5])
    elif op == "nc_transpose":
        case["engine"] = draw(st.sampled_from(("tensor", "vector")))
        case["dst"] = draw(st.sampled_from(((free, partitions), (partitions, free))))
        case["dst_buffer"] = "psum" if case["engine"] == "tensor" else "sbuf"
        case["dst_dtype"] = dtype if draw(st.floats(0, 1)) < 0.8 else dst_dtype
    elif op == "nc_matmul":
        moving_free = draw(st.sampled_from((1, 64, 512, 513)))
        case["moving"] = (partitions, moving_free)
        case["dst"] = draw(st.sampled_from(((free, moving_free), (moving_free, free))))
        case["dst_buffer"] = draw(st.sampled_from(("psum", "psum", "sbuf")))
        case["dst_dtype"] = draw(st.sampled_from(("float32", "float32", "bfloat16", "int32")))
        kwargs["accumulate"] = _maybe(draw, draw(st.sampled_from((None, False))), bad=("yes", 3))
    if draw(st.floats(0, 1)) < 0.1:  # engine choice, sometimes one the instruction has not
        case["engine"] = draw(st.sampled_from(("vector", "gpsimd", "scalar", "tensor", "bogus")))
    if draw(st.floats(0, 1)) < 0.05:
        kwargs[draw(st.sampled_from(("acumulate", "mask", "dtype")))] = True
    return target, case


# --- the kernel and the reference ---------------------------------------------------------------
def _resolve(value, tiles):
    """Tile placeholders ("column", "column11") become the kernel's tiles."""
    return tiles[value] if isinstance(value, str) and value in tiles else value


def make_kernel(case):
    def kernel(a, b, m):
        rows, start = case["data"][0], case["start"]
        block = nl.ndarray((start + rows, case["data"][1]), dtype=case["dtype"], buffer=nl.sbuf)
        data = block[start:start + rows]  # a tile that may start at a partition other than 0
        nisa.dma_copy(dst=data, src=a[0:rows, 0:case["data"][1]])
        other = nl.ndarray(case.get("data2", case["data"]), dtype=case["dtype"], buffer=nl.sbuf)
        nisa.dma_copy(dst=other, src=b[0:other.shape[0], 0:other.shape[1]])
        column = nl.ndarray(case["column"], dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=column, src=b[0:case["column"][0], 0:1])
        column11 = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=column11, src=b[0:1, 0:1])
        tiles = {"column": column, "column11": column11}
        buffer = nl.psum if case["dst_buffer"] == "psum" else nl.sbuf
        dst = nl.ndarray(case["dst"], dtype=case["dst_dtype"], buffer=buffer)
        kwargs = {key: _resolve(value, tiles) for key, value in case["kwargs"].items()}
        if case["engine"] is not None:
            kwargs["engine"] = getattr(nisa.engine, case["engine"], case["engine"])
        _issue(case, dst, data, other, m, kwargs)
        staged = nl.ndarray(dst.shape, dtype=dst.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=staged, src=dst)
        out = nl.ndarray(dst.shape, dtype=dst.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=staged)
        return out
    return kernel


def _issue(case, dst, data, other, m, kwargs):
    op = case["op"]
    if op in ("tensor_copy", "reciprocal"):
        getattr(nisa, op)(dst, data, **kwargs)
    elif op == "tensor_tensor":
        nisa.tensor_tensor(dst=dst, data1=data, data2=other, **kwargs)
    elif op == "scalar_tensor_tensor":
        nisa.scalar_tensor_tensor(dst=dst, data=data, operand1=other, **kwargs)
    elif op == "tensor_partition_reduce":
        nisa.tensor_partition_reduce(dst=dst, data=data, **kwargs)
    elif op in ("tensor_scalar", "tensor_reduce"):
        getattr(nisa, op)(dst=dst, data=data, **kwargs)
    elif op == "activation":
        nisa.activation(dst=dst, data=data, **kwargs)
    elif op == "memset":
        nisa.memset(dst=dst, **kwargs)
    elif op == "nc_transpose":
        nisa.nc_transpose(dst=dst, data=data, **kwargs)
    elif op == "nc_matmul":
        moving = nl.ndarray(case["moving"], dtype=case["dtype"], buffer=nl.sbuf)
        nisa.dma_copy(dst=moving, src=m[0:case["moving"][0], 0:case["moving"][1]])
        nisa.nc_matmul(dst=dst, stationary=data, moving=moving, **kwargs)


def _name(op):
    return op if isinstance(op, str) else op.__name__


def _cast(values, dtype: str):
    """fp32 values as the engines store them: round to nearest even; integers saturate and NaN is 0."""
    if dtype == "int32":
        rounded = np.nan_to_num(np.rint(np.asarray(values, np.float64)), nan=0.0)
        return np.ascontiguousarray(np.clip(rounded, -2.0**31, 2.0**31 - 1)).astype(np.int32)
    return np.ascontiguousarray(values, np.float32).astype(_NUMPY[dtype])


def reference(case, a, b, m):
    """What the instruction must produce, computed with numpy in fp32 and cast to dst's dtype."""
    def tile(array, shape):
        return _cast(array[:shape[0], :shape[1]], case["dtype"]).astype(np.float32)

    data = tile(a, case["data"])
    column = b[:case["column"][0], 0:1]
    kwargs = case["kwargs"]
    op = case["op"]
    if op == "tensor_copy":
        result = data
    elif op == "reciprocal":
        with np.errstate(divide="ignore"):
            result = np.float32(1) / data
    elif op == "tensor_tensor":
        other = tile(b, data.shape)
        result = _ALU[_name(kwargs["op"])](data, other)
    elif op == "tensor_scalar":
        operand = column if isinstance(kwargs["operand0"], str) else np.float32(kwargs["operand0"])
        pair = (operand, data) if kwargs["reverse0"] else (data, operand)
        result = _ALU[_name(kwargs["op0"])](*pair)
    elif op == "activation":
        result = data * np.float32(kwargs["scale"])
        if kwargs["bias"] is not None:  # no bias adds nothing (-0.0 stays -0.0)
            result = result + (column if isinstance(kwargs["bias"], str) else np.float32(kwargs["bias"]))
        result = _ACTIVATIONS[_name(kwargs["op"])](result)
    elif op == "scalar_tensor_tensor":
        operand = column if isinstance(kwargs["operand0"], str) else np.float32(kwargs["operand0"])
        first = _ALU[_name(kwargs["op0"])](data, operand)
        pair = (tile(b, data.shape), first) if kwargs["reverse1"] else (first, tile(b, data.shape))
        result = _ALU[_name(kwargs["op1"])](*pair)
    elif op == "tensor_partition_reduce":
        # [1, F], or the same values down F partitions when dst is [F, 1] (as nl.sum(axis=0) writes)
        result = _REDUCE[_name(kwargs["op"])].reduce(data, axis=0, keepdims=True).reshape(case["dst"])
    elif op == "tensor_reduce":
        result = _REDUCE[_name(kwargs["op"])].reduce(data, axis=1, keepdims=True)
    elif op == "memset":
        result = np.full(case["dst"], kwargs["value"], np.float32)
    elif op == "nc_transpose":
        result = data.T
    else:  # nc_matmul: stationary.T @ moving, exact for these inputs
        moving = tile(m, case["moving"])
        result = data.T @ moving
    return _cast(result, case["dst_dtype"])


def _outcome(run):
    """('ok', value) or ('refused', error); anything that is not a TrnsimError fails the test."""
    try:
        return "ok", run()
    except TrnsimError as error:
        return "refused", error


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instructions(), st.integers(0, 2**16))
def test_random_instructions_are_refused_with_the_kernel_line_or_match_numpy(drawn, seed):
    target, case = drawn
    rng = np.random.default_rng(seed)
    a, b, m = (rng.integers(-16, 17, size=(160, 640)).astype(np.float32) / 2 for _ in range(3))
    kernel = make_kernel(case)
    traced = _outcome(lambda: nki.trace(kernel, a, b, m, target=target))
    simulated = _outcome(lambda: nki.simulate(kernel, target=target)(a, b, m))
    assert traced[0] == simulated[0], f"trace-only {traced[0]} but simulate {simulated[0]}: {case}"
    if simulated[0] == "refused":
        message = str(simulated[1])
        assert message.startswith(KERNEL_LINE), message
        assert str(traced[1]) == message
        return
    expected = reference(case, a, b, m)
    np.testing.assert_array_equal(np.asarray(simulated[1]).view(np.uint8), expected.view(np.uint8),
                                  err_msg=f"{target} {case}")


@pytest.mark.parametrize("junk", JUNK, ids=lambda v: type(v).__name__)
def test_junk_where_a_tile_goes_is_refused_by_name(junk):
    def kernel(a):
        tile = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tile, src=junk)
        return tile

    with pytest.raises(TrnsimError, match=rf"^{KERNEL_LINE}\d+ in kernel: nisa.tensor_copy: src is "):
        nki.simulate(kernel)(np.ones((8, 8), np.float32))
