"""nc_matmul(is_transpose=True): the stationary tile is transposed through an identity moving
tile, bit-exactly (the mode exists for that), and the ordinary dst shape rule applies."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ShapeError


@nki.jit
def transpose_through_pe(data, identity, out_rows):
    dst = nl.ndarray((data.shape[1], identity.shape[1]), dtype=data.dtype, buffer=nl.psum)
    if out_rows != data.shape[1]:
        dst = nl.ndarray((out_rows, identity.shape[1]), dtype=data.dtype, buffer=nl.psum)
    nisa.nc_matmul(dst=dst, stationary=nl.load(data), moving=nl.load(identity), is_transpose=True)
    out = nl.ndarray(dst.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray(dst.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=tile, src=dst)
    nl.store(out, tile)
    return out


def test_nan_and_inf_pass_unchanged():
    data = np.random.default_rng(2).standard_normal((64, 32)).astype(np.float32)
    data[3, 5], data[7, 1], data[0, 0] = np.nan, np.inf, -np.inf
    out = nki.simulate(transpose_through_pe, target="trn2")(data, np.eye(64, dtype=np.float32), 32)
    assert np.array_equal(out, data.T, equal_nan=True)


def test_a_moving_tile_that_is_not_one_hot_gets_the_product():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((16, 8)).astype(np.float32)
    mixing = rng.standard_normal((16, 16)).astype(np.float32)
    out = nki.simulate(transpose_through_pe, target="trn2")(data, mixing, 8)
    np.testing.assert_allclose(out, data.T @ mixing, rtol=1e-5, atol=1e-5)


def test_dst_must_be_stationary_free_by_moving_free():
    data = np.ones((64, 32), np.float32)
    with pytest.raises(ShapeError, match=r"stationary.T @ moving is \[32, 64\]") as error:
        nki.simulate(transpose_through_pe, target="trn2")(data, np.eye(64, dtype=np.float32), 16)
    assert "test_nki_transpose_mode.py" in str(error.value)
