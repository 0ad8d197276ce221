"""One kernel with several collectives, run as this process's rank under torchrun (gloo):
    torchrun --nproc_per_node=4 tests/system/torchrun_kernel.py OUTDIR
Each rank writes its result to OUTDIR/rank<r>.npy. test_torchrun.py runs it and compares the bytes
with the same kernel on threads (system.launch)."""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

import trnsim.nki as nki
import trnsim.nki.collectives as ncc
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import system


@nki.jit
def chained_collectives(x, ranks):
    """all_reduce (add), then reduce_scatter (max) of that, then all_gather back: bf16 throughout."""
    group = ncc.ReplicaGroup([list(range(ranks))])
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    summed = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="summed")
    part = nl.ndarray((x.shape[0] // ranks, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm, name="part")
    gathered = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="gathered")
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[summed], replica_group=group, op=nl.add)
    ncc.reduce_scatter(srcs=[summed], dsts=[part], replica_group=group, collective_dim=0, op=nl.maximum)
    ncc.all_gather(srcs=[part], dsts=[gathered], replica_group=group, collective_dim=0)
    nisa.dma_copy(dst=out, src=gathered)
    return out


def rank_input(rank: int) -> np.ndarray:
    return np.random.default_rng(rank).standard_normal((16, 32)).astype(ml_dtypes.bfloat16)


if __name__ == "__main__":
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    result = system.launch_distributed(chained_collectives, rank_input(rank), ranks)
    np.save(Path(sys.argv[1]) / f"rank{rank}.npy", result.view(np.uint16))
    dist.destroy_process_group()
