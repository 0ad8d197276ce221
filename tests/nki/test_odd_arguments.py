"""Arguments of the wrong kind, found by use: each raised a raw Python/numpy error with no kernel
line (ValueError, TypeError, OverflowError); each is now a TrnsimError at the kernel's line."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import TrnsimError

X = np.ones((128, 512), np.float32)


def _psum():
    return nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)


CASES = {
    "sendrecv rank text": (lambda t: nisa.sendrecv(src=t, dst=t, send_to_rank="one", recv_from_rank=0,
                                                   pipe_id=0), "send_to_rank must be an integer"),
    "sendrecv pipe None": (lambda t: nisa.sendrecv(src=t, dst=t, send_to_rank=0, recv_from_rank=0,
                                                   pipe_id=None), "pipe_id must be an integer"),
    "reshape None": (lambda t: t.reshape(None), "a shape is a tuple of dims"),
    "ap offset None": (lambda t: t.ap([[512, 128], [1, 512]], None), "'offset': None is not an integer"),
    "huge tile": (lambda t: nl.ndarray((10**20, 4), dtype=nl.float32, buffer=nl.sbuf), "partitions"),
    "tile_position array": (lambda t: nisa.nc_matmul(dst=_psum(), stationary=t[:, 0:128], moving=t,
                                                     tile_position=np.array([0, 0])), "tile_position="),
    "engine array": (lambda t: nisa.memset(dst=t, value=0.0, engine=np.ones(3)),
                     r"engine is a numpy array .*; it must be one of \['dma', "),
}


@pytest.mark.parametrize("name", CASES)
def test_an_argument_of_the_wrong_kind_is_refused_at_the_kernel_line(name):
    body, says = CASES[name]

    @nki.jit
    def kernel(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        body(t)
        return x

    for run in (lambda: nki.simulate(kernel, target="trn2")(X),
                lambda: nki.trace(kernel, nki.TensorSpec((128, 512), "float32"), target="trn2")):
        with pytest.raises(TrnsimError, match=says) as raised:
            run()
        assert str(raised.value).startswith("test_odd_arguments.py:")


def test_a_numpy_integer_is_a_reshape_dim():
    @nki.jit
    def kernel(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        assert t.reshape(np.int64(128 * 512)).shape == (128 * 512,)
        return x
    nki.trace(kernel, nki.TensorSpec((128, 512), "float32"), target="trn2")
