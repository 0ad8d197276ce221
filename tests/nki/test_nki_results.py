"""Kernel results belong to the caller: later runs, other results and inputs never share their
memory, although a kernel-made output is handed over without a copy (its memory comes from the
array pool, which reuses a block only once nothing refers to it)."""

import numpy as np

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

X = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)  # 128 KiB: large enough to be pooled


@nki.jit
def plus(x, amount):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=amount)
    nl.store(out, tile)
    return out


def test_a_result_keeps_its_values_through_later_runs():
    first = plus(X, 1.0)
    kept = first.copy()
    for amount in (2.0, 3.0, 4.0):
        plus(X, amount)  # each run's output may come from the pool: never from `first`'s memory
    np.testing.assert_array_equal(first, kept)
    first[...] = 0.0  # the caller may write its result
    np.testing.assert_array_equal(plus(X, 1.0), kept)


def test_the_same_tensor_returned_twice_gives_two_arrays():
    @nki.jit
    def twice(x):
        out = plus.fn(x, 1.0)
        return out, out
    a, b = twice(X)
    a[...] = 0.0
    np.testing.assert_array_equal(b, X + 1.0)


def test_a_returned_input_is_a_copy_not_the_callers_array():
    @nki.jit
    def identity(x):
        return x
    result = identity(X)
    result[...] = -1.0
    assert X[0, 1] == 1.0


def test_a_shared_constant_never_aliases_the_callers_array():
    table = np.ones((128, 256), np.float32)

    @nki.jit
    def constant_out(x):
        return nl.shared_constant(table)
    result = constant_out(X)
    result[...] = 5.0
    assert (table == 1.0).all()
