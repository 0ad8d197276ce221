"""A kernel's permute is timed between its rank and its peer: every permute used to be timed as a
step between ranks 0 and 1 of one chip, whatever its pairs."""

import numpy as np

import trnsim.nki as nki
import trnsim.nki.collectives as ncc
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core.isa import Opcode
from trnsim.system.collectives import instruction_seconds, timed_on
from trnsim.system.launch import launch
from trnsim.timing.costs import core_spec


def _swap(pairs):
    @nki.jit
    def kernel(x):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=src, src=x)
        nisa.dma_copy(dst=dst, src=x)
        ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=pairs)
        return dst
    return kernel


def _permute_seconds(pairs, ranks=8):
    x = np.ones((256, 1024), np.float32)
    results = launch(_swap(pairs), ranks, lambda rank: (x * rank,))
    permute = next(ins for ins in results.traces[0] if ins.opcode is Opcode.COLLECTIVE)
    assert permute.param("peer") == pairs[1][0]
    with timed_on(results.machine):
        return instruction_seconds(permute, core_spec("trn2")), results


def test_a_permute_across_chips_takes_longer_than_one_within_a_chip():
    near, results = _permute_seconds([[0, 1], [1, 0]])        # LNC=2 trn2: ranks 0-3 share a chip
    far, _ = _permute_seconds([[0, 4], [4, 0]])
    np.testing.assert_array_equal(results[1], np.zeros((256, 1024), np.float32))
    assert 0 < near < far
