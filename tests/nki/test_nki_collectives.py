"""nki.collectives details found by audit: integer reductions, operand checks, argument errors."""

import numpy as np
import pytest
from kernel_helpers import to_hbm

import trnsim.nki as nki
import trnsim.nki.collectives as ncc
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import system
from trnsim.core import blas
from trnsim.errors import ArgumentError, ShapeError

PAIR = ncc.ReplicaGroup([[0, 1]])


def hbm(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


@nki.jit
def all_reduce(x, op):
    dst = hbm(x.shape, x.dtype)
    ncc.all_reduce(srcs=[to_hbm(x)], dsts=[dst], replica_group=PAIR, op=op)
    return to_hbm(dst)


@pytest.mark.parametrize("a, b, op, dtype, expected", [
    (2**24 + 1, 2, nl.add, np.int32, 2**24 + 3),          # went through fp32: 16777218
    (2**24 + 1, 2, nl.maximum, np.int32, 2**24 + 1),      # fp32: 16777216
    (2**31 - 1, -5, nl.add, np.int32, 2**31 - 6),         # fp32 saturated: 2147483647
    (2**31 - 1, 1, nl.add, np.int32, -2**31),             # wraps, as int32 tensor_tensor does
    (2**32 - 1, 2, nl.add, np.uint32, 1),
    (200, 100, nl.add, np.uint8, 255),                    # through fp32, saturated, as tensor_tensor
])
def test_integer_all_reduce_follows_tensor_tensor(a, b, op, dtype, expected):
    results = system.launch(all_reduce, 2, [(np.full((4, 8), a, dtype), op), (np.full((4, 8), b, dtype), op)])
    for result in results:
        assert result.dtype == dtype
        np.testing.assert_array_equal(result, np.full((4, 8), expected, dtype))


def test_a_multi_rank_launch_gives_the_process_its_blas_threads_back():
    """Each rank's kernel runs with one BLAS thread; the ranks are threads that overlap (they meet
    in the all_reduce), so one ending first must not restore the count, nor the last keep one."""
    before = blas.threads()
    for _ in range(5):
        system.launch(all_reduce, 2, [(np.ones((4, 8), np.float32), nl.add)] * 2)
        assert blas.threads() == before


def _permute_reduce(shape1, dtype=nl.float32):
    @nki.jit
    def kernel(x):
        src1 = hbm(shape1, dtype)
        tile = nl.ndarray(shape1, dtype=dtype, buffer=nl.sbuf)
        nisa.memset(dst=tile, value=1)
        nisa.dma_copy(dst=src1, src=tile)
        dst = hbm(x.shape, x.dtype)
        ncc.collective_permute_implicit_reduce(srcs0_by_channel=[[to_hbm(x)]], srcs1_by_channel=[[src1]],
                                               dsts_by_channel=[[dst]], replica_group=PAIR, op=nl.add)
        return to_hbm(dst)
    return kernel


def test_permute_implicit_reduce_adds_int32_exactly():
    xs = [np.full((4, 8), 2**24 + r, np.int32) for r in range(2)]
    results = system.launch(_permute_reduce((4, 8), nl.int32), 2, xs)
    np.testing.assert_array_equal(results[0], xs[1] + 1)
    np.testing.assert_array_equal(results[1], xs[0] + 1)


@pytest.mark.parametrize("shape1", [(2, 8), (8, 4)])
def test_permute_implicit_reduce_refuses_srcs1_of_another_shape(shape1):
    """A raw ValueError (all input arrays must have the same shape) came from inside trnsim."""
    xs = [np.full((4, 8), 10.0 * (r + 1), np.float32) for r in range(2)]
    with pytest.raises(ShapeError, match=r"test_nki_collectives.py:\d+ in kernel: .*srcs1 shapes"):
        system.launch(_permute_reduce(shape1), 2, xs)


@nki.jit
def permute_channel_ids_0(x):
    dst = hbm(x.shape)
    ncc.collective_permute_implicit(srcs_by_channel=[[to_hbm(x)]], dsts_by_channel=[[dst]],
                                    replica_group=PAIR, channel_ids=0)
    return to_hbm(dst)


def test_channel_ids_that_are_not_a_list_are_refused_at_the_line():
    """A raw TypeError (object of type 'int' has no len()) came from inside trnsim."""
    xs = [np.zeros((4, 8), np.float32)] * 2
    with pytest.raises(ArgumentError, match=r"test_nki_collectives.py:\d+ in permute_channel_ids_0: .*"
                                            r"channel_ids=0"):
        system.launch(permute_channel_ids_0, 2, xs)


def test_replica_group_refuses_an_unknown_keyword_at_the_line():
    with pytest.raises(ArgumentError, match=r"test_nki_collectives.py:\d+ in test_replica_group_refuses.*"
                                            r"unexpected keyword argument 'foo'"):
        ncc.ReplicaGroup(groups=[[0, 1]], foo=1)
    assert ncc.ReplicaGroup(groups=[[0, 1]]).groups == ((0, 1),)
