"""The engines' accumulator registers, as the nki.isa docs describe them: `reduce_res=None` keeps
a sum in the registers for a later call to read, and the Scalar Engine's registers (activation's
reduce_regs) are not the Vector Engine's."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ArgumentError

X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)


def _run(body):
    @nki.jit
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        scratch = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        body(t, scratch, total)
        out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=total)
        return out
    return nki.simulate(kernel, target="trn2")(X)


def test_a_sum_kept_in_the_registers_is_added_to_by_the_next_call():
    """The first call's sum was thrown away without reduce_res: [6, 15] instead of [12, 30]."""
    def activation(t, scratch, total):
        nisa.activation(dst=scratch, op=nl.copy, data=t, reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=scratch, op=nl.copy, data=t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce,
                        reduce_res=total)

    def vector(t, scratch, total):
        for cmd, res in ((nisa.reduce_cmd.reset_reduce, None), (nisa.reduce_cmd.reduce, total)):
            nisa.tensor_scalar_reduce(dst=scratch, data=t, op0=nl.add, operand0=0.0, reduce_op=nl.add,
                                      reduce_cmd=cmd, reduce_res=res)
    for body in (activation, vector):
        np.testing.assert_array_equal(_run(body)[:, 0], 2 * X.sum(axis=1))


def test_the_vector_engine_does_not_read_the_scalar_engines_registers():
    """A VectorE reduce picked up the sums an earlier ScalarE activation left: [6, 15], not [0, 0]."""
    def body(t, scratch, total):
        nisa.activation(dst=scratch, op=nl.copy, data=t, reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.tensor_scalar_reduce(dst=scratch, data=t, op0=nl.multiply, operand0=0.0, reduce_op=nl.add,
                                  reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=total)
    np.testing.assert_array_equal(_run(body)[:, 0], [0.0, 0.0])


def test_load_reduce_starts_the_accumulator_from_reduce_init():
    """load_reduce was refused as not emulated; it loads reduce_init (a number or a [P, 1] tile)
    and reduces onto it, and a later reduce goes on from there."""
    def body(t, scratch, total):
        start = nl.ndarray((t.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(dst=start, pattern=[[0, 1]], offset=100, channel_multiplier=10)  # 100, 110
        nisa.tensor_scalar_reduce(dst=scratch, data=t, op0=nl.add, operand0=0.0, reduce_op=nl.add,
                                  reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=start)
        nisa.tensor_scalar_reduce(dst=scratch, data=t, op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                                  reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=total)
    np.testing.assert_array_equal(_run(body)[:, 0], np.array([100.0, 110.0]) + 3 * X.sum(axis=1))


def test_exponential_load_reduce_adds_its_sum_to_reduce_init_even_when_it_is_zero():
    @nki.jit
    def kernel(x, init):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        scratch = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        totals = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.exponential(dst=scratch, src=t, reduce_cmd=nisa.reduce_cmd.reset_reduce,
                         reduce_res=totals[:, 0:1])
        nisa.exponential(dst=scratch, src=t, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=init,
                         reduce_res=totals[:, 1:2])
        out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=totals)
        return out
    sums = np.exp(X).sum(axis=1, dtype=np.float32)
    for init in (0.0, -1.5):
        result = nki.simulate(kernel, target="trn3")(X, init)
        np.testing.assert_allclose(result[:, 0], sums, rtol=1e-6)
        np.testing.assert_allclose(result[:, 1], init + sums, rtol=1e-6)  # not 2 * sums: loaded, not kept


def test_load_reduce_without_reduce_init_or_on_a_call_without_one_is_refused_at_the_line():
    def missing(t, scratch, total):
        nisa.tensor_scalar_reduce(dst=scratch, data=t, op0=nl.add, operand0=0.0, reduce_op=nl.add,
                                  reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_res=total)

    def activation(t, scratch, total):
        nisa.activation(dst=scratch, op=nl.copy, data=t, reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_res=total)
    refusals = ((missing, "reduce_init is not given"),
                (activation, "reduce_cmd='load_reduce'; it must be one of"))
    for body, match in refusals:
        with pytest.raises(ArgumentError, match=r"^test_accumulators\.py:\d+ in .*" + match):
            _run(body)
