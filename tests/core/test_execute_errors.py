"""An error while executing an instruction names that instruction's kernel line, even when the
instruction ran from the deferred queue after later lines were issued."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core.execute import EXECUTE
from trnsim.core.isa import Opcode
from trnsim.errors import KernelError


def _broken_rule(ins, io):
    raise ValueError("operands could not be broadcast together")


def kernel(a, store_psum=False):
    stationary = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=stationary, value=1.0)
    acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=stationary, moving=stationary)  # from here on, instructions queue
    tile = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=tile, data=acc)
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    if store_psum:
        nl.store(out, acc)  # refused (PSUM source): the queue runs first, so the reciprocal's error shows
    else:
        nisa.dma_copy(dst=out, src=tile)
    return out


@pytest.mark.parametrize("store_psum", [False, True])
def test_a_failure_inside_a_deferred_rule_names_the_instruction_line(monkeypatch, store_psum):
    """Also when it surfaces in a later call: not "nl.store (nisa.reciprocal)", since the store
    did not issue the reciprocal."""
    monkeypatch.setitem(EXECUTE, Opcode.RECIPROCAL, _broken_rule)
    line = kernel.__code__.co_firstlineno + 6
    with pytest.raises(KernelError, match=rf"^test_execute_errors\.py:{line} in kernel: nisa\.reciprocal: "
                                          r"executing this instruction failed inside trnsim \(ValueError"):
        nki.simulate(kernel)(np.ones((2, 2), np.float32), store_psum=store_psum)
