"""The same kernel as processes under torchrun (torch.distributed, gloo) and as threads gives
identical bytes on every rank."""

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from trnsim import system

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import torchrun_kernel  # noqa: E402

sys.path.remove(str(HERE))


@pytest.mark.parametrize("ranks", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_torchrun_gloo_ranks_match_thread_ranks_bit_for_bit(ranks, tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    environment = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([torchrun, "--standalone", f"--nproc_per_node={ranks}",
                           str(HERE / "torchrun_kernel.py"), str(tmp_path)],
                          env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    threads = system.launch(torchrun_kernel.chained_collectives, ranks,
                            lambda rank: (torchrun_kernel.rank_input(rank), ranks))
    for rank in range(ranks):
        assert np.array_equal(np.load(tmp_path / f"rank{rank}.npy"), threads[rank].view(np.uint16))
    # max over ranks of the (identical) sums, gathered back, is the bf16 rounding of the fp32 sum
    inputs = np.stack([torchrun_kernel.rank_input(r).astype(np.float32) for r in range(ranks)])
    assert np.array_equal(threads[0], inputs.sum(axis=0).astype(threads[0].dtype))
