"""Results the nki.isa docs define bit for bit: int32 arithmetic on GpSimd, bitvec immediates and
partition reductions as bit patterns, outputs rounded to tf32, int32 iota offsets."""

import numpy as np
import pytest
from kernel_builders import staged_kernel

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import numerics
from trnsim.errors import ArgumentError


def _run(body, *arrays, out_shape, out_dtype):
    kernel = staged_kernel(body, out_shape, out_dtype)
    return nki.simulate(kernel, target="trn2")(*arrays), kernel


def test_int32_tensor_tensor_is_exact_and_runs_on_gpsimd():
    """16777217 + 0 came out 16777216: the sum went through fp32 on the Vector Engine."""
    a, b = np.array([[16777217, 100000001]], np.int32), np.array([[0, 1]], np.int32)
    got, kernel = _run(lambda o, x, y: nisa.tensor_tensor(dst=o, data1=x, data2=y, op=nl.add), a, b,
                       out_shape=(1, 2), out_dtype=nl.int32)
    np.testing.assert_array_equal(got, a + b)
    assert [i.engine.value for i in kernel.last_trace if i.opcode.value == "tensor_tensor"] == ["gpsimd"]


def test_bitvec_immediates_and_partition_reductions_keep_every_bit():
    """An AND with 16777217 used 16777216; a partition OR of 2**24 + 1 gave 2**24."""
    x = np.array([[-1, 7]], np.int32)
    got, _ = _run(lambda o, t: nisa.tensor_scalar(dst=o, data=t, op0=nl.bitwise_and, operand0=16777217), x,
                  out_shape=(1, 2), out_dtype=nl.int32)
    np.testing.assert_array_equal(got, x & 16777217)
    y = np.array([[2**24 + 1], [0]], np.int32)
    got, _ = _run(lambda o, t: nisa.tensor_partition_reduce(dst=o, op=nl.bitwise_or, data=t), y,
                  out_shape=(1, 1), out_dtype=nl.int32)
    assert got[0, 0] == 2**24 + 1


def test_results_written_to_tf32_are_rounded_to_tf32():
    """A tf32 tile is kept in fp32 storage, and 0.1 was stored unrounded."""
    x = np.array([[0.1, 1.0009766]], np.float32)
    got, _ = _run(lambda o, t: nisa.tensor_copy(dst=o, src=t), x, out_shape=(1, 2), out_dtype=nl.tfloat32)
    np.testing.assert_array_equal(got.astype(np.float32), numerics.cast(x, "tfloat32"))


def test_an_iota_offset_is_an_integer():
    with pytest.raises(ArgumentError, match="offset=0.5; it must be an integer"):
        _run(lambda o, t: nisa.iota(dst=o, pattern=[[1, 4]], offset=0.5), np.zeros((1, 4), np.int32),
             out_shape=(1, 4), out_dtype=nl.int32)


def test_operators_the_alu_table_allows_are_accepted():
    """tensor_reduce with subtract and logical_xor ("Legal Reduction op: Y"), tensor_partition_reduce
    with average, and nl.invert as tensor_scalar's unary op0 were refused."""
    x = np.array([[1.0, 2.0, 4.0], [3.0, 0.0, 1.0]], np.float32)
    got, _ = _run(lambda o, t: nisa.tensor_reduce(dst=o, op=nl.subtract, data=t, axis=1), x,
                  out_shape=(2, 1), out_dtype=nl.float32)
    np.testing.assert_array_equal(got[:, 0], [1 - 2 - 4, 3 - 0 - 1])
    got, _ = _run(lambda o, t: nisa.tensor_reduce(dst=o, op=nl.logical_xor, data=t, axis=1), x,
                  out_shape=(2, 1), out_dtype=nl.float32)
    np.testing.assert_array_equal(got[:, 0], [1.0, 0.0])
    got, _ = _run(lambda o, t: nisa.tensor_partition_reduce(dst=o, op=nl.average, data=t), x,
                  out_shape=(1, 3), out_dtype=nl.float32)
    np.testing.assert_array_equal(got[0], x.mean(axis=0))
    bits = np.array([[5, -1]], np.int32)
    got, _ = _run(lambda o, t: nisa.tensor_scalar(dst=o, data=t, op0=nl.invert, operand0=None), bits,
                  out_shape=(1, 2), out_dtype=nl.int32)
    np.testing.assert_array_equal(got, ~bits)


def test_int32_arithmetic_on_the_vector_engine_goes_through_fp32():
    """Only GpSimd does native integers: a PSUM tile (GpSimd cannot reach PSUM) or engine=vector
    keeps the Vector Engine and its fp32 arithmetic (a PSUM operand was refused for GpSimd)."""
    a, b = np.array([[16777217]], np.int32), np.array([[0]], np.int32)

    def in_psum(o, x, y):
        p = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=x)
        nisa.tensor_tensor(dst=o, data1=p, data2=y, op=nl.add)
    for body in (in_psum, lambda o, x, y: nisa.tensor_tensor(dst=o, data1=x, data2=y, op=nl.add,
                                                              engine=nisa.engine.vector)):
        got, kernel = _run(body, a, b, out_shape=(1, 1), out_dtype=nl.int32)
        assert got[0, 0] == 16777216
        assert [i.engine.value for i in kernel.last_trace if i.opcode.value == "tensor_tensor"] == ["vector"]


@pytest.mark.parametrize("size", [128, 16])  # the PE array's transpose and the Vector engine's
def test_nl_transpose_and_where_keep_every_bit_of_int32(size):
    """nl.transpose staged int32 through an fp32 PSUM tile and nl.where's predicated copy went
    through fp32: values above 2^24 came back rounded."""
    rng = np.random.default_rng(0)
    a = rng.integers(-2**30, 2**30, (size, size)).astype(np.int32)
    got, _ = _run(lambda o, t: nisa.tensor_copy(dst=o, src=nl.transpose(t)), a,
                  out_shape=(size, size), out_dtype=nl.int32)
    np.testing.assert_array_equal(got, a.T)
    keep = (rng.random((size, size)) > 0.5).astype(np.int32)
    got, _ = _run(lambda o, t, u, k: nisa.tensor_copy(dst=o, src=nl.where(k, t, u)), a, a + 1, keep,
                  out_shape=(size, size), out_dtype=nl.int32)
    np.testing.assert_array_equal(got, np.where(keep != 0, a, a + 1))
