"""The `neuron` process-group backend: DDP, FSDP2, DTensor TP, pipelining and distributed checkpoint
on neuron, each bitwise equal to the same run on CPU with gloo (tests/torch/dist_parallel.py)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import trnsim.torch  # noqa: F401

SCRIPT = Path(__file__).with_name("dist_parallel.py")
STRATEGIES = ("ddp+dcp", "fsdp2", "tp", "pipeline")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(ranks: int, tmp_path, **variables: str) -> list[str]:
    """What torchrun --nproc_per_node=ranks does, without its launcher process."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "WORLD_SIZE": str(ranks), "OMP_NUM_THREADS": "1", **variables}
    processes = [subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
                 for rank in range(ranks)]
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-3000:]
    return sorted(line for stdout, _ in outputs for line in stdout.splitlines())


def _expected(ranks: int) -> list[str]:
    lines = [f"{name} {rank} equal" for name in STRATEGIES for rank in range(ranks)]
    return sorted(lines + [f"profile {rank} ok" for rank in range(ranks)])


def test_every_strategy_on_two_ranks_is_bitwise_equal_to_cpu(tmp_path):
    assert _launch(2, tmp_path) == _expected(2)


@pytest.mark.slow
def test_every_strategy_on_four_ranks_is_bitwise_equal_to_cpu(tmp_path):
    assert _launch(4, tmp_path) == _expected(4)  # TP pairs with FSDP2 across them (2-D mesh)


def test_neuron_backend_is_registered_for_both_devices():
    assert dist.Backend.NEURON == "neuron"
    assert dist.Backend.backend_capability["neuron"] == ["neuron", "cpu"]
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"


def test_one_rank_group_reduces_neuron_and_cpu_tensors(tmp_path):
    dist.init_process_group("neuron", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        on_device, on_host = torch.arange(4.0, device="neuron"), torch.arange(4.0)
        dist.all_reduce(on_device)
        dist.all_reduce(on_host)
        assert dist.get_backend() == "neuron" and on_device.device.type == "neuron"
        assert torch.equal(on_device.cpu(), on_host)
    finally:
        dist.destroy_process_group()
