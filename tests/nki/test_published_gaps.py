"""Gaps found by running the public NKI kernels (tests/published, docs/published-kernels.md)."""

import time

import ml_dtypes
import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import HazardError, ShapeError, UnsupportedError
from trnsim.nki import lnc


def test_old_api_name_in_a_kernel_names_the_kernel_line():
    """nki-samples' fused_mamba tutorial still uses nl.par_dim: the refusal must point at that line."""

    @nki.jit
    def old_api_kernel(x):
        tile = nl.zeros((nl.par_dim(128), 64), dtype=x.dtype)
        return tile

    with pytest.raises(UnsupportedError, match=r"^test_published_gaps\.py:\d+ in old_api_kernel: .*par_dim"):
        nki.simulate(old_api_kernel)(np.zeros((128, 64), np.float32))


def test_back_to_back_sendrecv_on_one_pipe_delivers_every_tile_in_order(monkeypatch):
    """nki-library's MoE MLP exchanges tiles on pipe 0 many times in a row: a core that runs ahead must
    not overwrite the tile its peer has not collected yet (that lost a tile and deadlocked)."""
    monkeypatch.setattr(lnc, "_WAIT_S", 5.0)
    rounds = 30

    @nki.jit
    def exchange_rounds(x):
        out = nl.ndarray((rounds, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        me = nl.program_id(0)
        for i in range(rounds):
            mine = nl.full((1, 4), float(i + 100 * me), nl.float32)
            theirs = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.sbuf)
            nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
            if me == 0:
                nl.store(out[i:i + 1, :], theirs)
        return out

    result = nki.simulate(exchange_rounds[2], target="trn2")(np.zeros((1, 4), np.float32))
    np.testing.assert_array_equal(result[:, 0], np.arange(rounds) + 100)


def test_a_kernel_called_from_a_kernel_is_inlined_into_the_running_launch():
    """nki-library's moe_cte (a jit kernel) calls bwmm_shard_on_block (another jit kernel); NKI inlines
    every call at specialization time, so the callee runs on the caller's cores and sees its grid."""

    @nki.jit
    def shard_count(x):
        tile = nl.full((1, 4), float(nl.num_programs(axes=0)), nl.float32)
        return tile

    @nki.jit
    def caller(x):
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, shard_count(x))  # an SBUF tile made by the callee, on this core
        return out

    result = nki.simulate(caller[2], target="trn2")(np.zeros((1, 4), np.float32))
    np.testing.assert_array_equal(result, np.full((1, 4), 2.0))


def test_dma_transpose_of_a_4d_tile_permutes_as_documented():
    """nki.isa.dma_transpose: "For 4-d input tile, the permutation will be [3, 1, 2, 0]" (not reversed);
    nki-library's qkv_cte loads its input that way."""

    @nki.jit
    def transpose_4d(x):
        tile = nl.ndarray((5, 3, 4, 2), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=tile, src=x)
        out = nl.ndarray(tile.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(nki.simulate(transpose_4d, target="trn2")(x), x.transpose(3, 1, 2, 0))


def test_an_nl_ds_index_out_of_bounds_is_named_as_written():
    """nki-library's bwmm_shard_on_block indexes with nl.ds; the refusal said `<DynSlice object at 0x..>`."""

    @nki.jit
    def past_the_end(x):
        tile = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        return tile[0:128, nl.ds(200, 128)]

    with pytest.raises(HazardError, match=r"index nl\.ds\(200, 128\) is out of bounds for dim 1"):
        nki.simulate(past_the_end)(np.zeros((1, 4), np.float32))


def test_a_core_that_fails_does_not_leave_its_peer_waiting_at_sendrecv(monkeypatch):
    """At LNC=2 an error on one core made the other wait the full minute at its next sendrecv before the
    launch reported the error (seen while running nki-library's MoE kernels)."""
    monkeypatch.setattr(lnc, "_WAIT_S", 20.0)

    @nki.jit
    def one_core_fails(x):
        me = nl.program_id(0)
        tile = nl.full((1, 4), 1.0, nl.float32)
        if me == 1:
            nl.zeros((256, 4), nl.float32)  # more than 128 partitions: refused
        nisa.sendrecv(src=tile, dst=tile, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
        return x

    started = time.monotonic()
    with pytest.raises(ShapeError, match=r"^test_published_gaps\.py:\d+ in one_core_fails"):
        nki.simulate(one_core_fails[2], target="trn2")(np.zeros((1, 4), np.float32))
    assert time.monotonic() - started < 10
