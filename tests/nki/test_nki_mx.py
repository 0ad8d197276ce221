"""Trn3 microscaling: quantize_mx and nc_matmul_mx against exact references."""

import ml_dtypes
import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import DTypeError, UnsupportedError

M, N = 32, 64


@nki.jit
def quantize_then_matmul(a, b):
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    scales_out = nl.ndarray((128, M), dtype=nl.uint8, buffer=nl.shared_hbm)
    qa = nl.ndarray((128, M), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    qb = nl.ndarray((128, N), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
    sa = nl.zeros((128, M), dtype=nl.uint8)
    sb = nl.zeros((128, N), dtype=nl.uint8)
    nisa.quantize_mx(dst=qa, src=nl.load(a), dst_scale=sa)
    nisa.quantize_mx(dst=qb, src=nl.load(b), dst_scale=sb)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=qa, moving=qb, stationary_scale=sa, moving_scale=sb)
    nl.store(out, nl.copy(acc))
    nl.store(scales_out, sa)
    return out, scales_out


def exact_inputs(rng, columns):
    """Values from {+-0.5, +-1, +-2} with one 4 per group: every group quantises exactly."""
    values = rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], size=(128, 4 * columns))
    values[::8, ::4] = 4.0
    return values.astype(ml_dtypes.bfloat16)


def contraction_major(x, columns):
    """[128, 4F] source as the [K = 512, F] matrix the MX matmul contracts (k = 4p + j)."""
    return x.astype(np.float32).reshape(128, columns, 4).transpose(0, 2, 1).reshape(512, columns)


def test_quantize_and_mx_matmul_are_exact_on_representable_data():
    rng = np.random.default_rng(3)
    a, b = exact_inputs(rng, M), exact_inputs(rng, N)
    result, scales = nki.simulate(quantize_then_matmul, target="trn3")(a, b)
    expected = contraction_major(a, M).T @ contraction_major(b, N)
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-5)
    # Trn3 rule: 2^(floor(log2 4) - (8 - 1)) = 2^-5 -> E8M0 code 122, in rows 32q + g % 4
    rows = [32 * (g // 4) + g % 4 for g in range(16)]
    assert (scales[rows] == 122).all()
    assert (np.delete(scales, rows, axis=0) == 0).all()


def test_mx_needs_trn3_and_packed_operands():
    rng = np.random.default_rng(4)
    with pytest.raises(UnsupportedError, match="generation 4"):
        nki.simulate(quantize_then_matmul, target="trn2")(exact_inputs(rng, M), exact_inputs(rng, N))

    def wrong(a):
        t = nl.load(a)
        q = nl.ndarray((128, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.zeros((128, 4), dtype=nl.uint8)
        nisa.quantize_mx(dst=q, src=t, dst_scale=s)
    with pytest.raises(DTypeError, match="bf16 or fp16"):
        nki.simulate(wrong, target="trn3")(np.ones((128, 16), np.float32))
