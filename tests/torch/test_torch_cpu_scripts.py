"""Installing trnsim never changes a script that never names neuron (issue 16)."""

import os
import subprocess
import sys

SCRIPT = """
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(8.0).reshape(4, 2), torch.arange(4))
for features, labels in DataLoader(data, batch_size=2, pin_memory=True):  # the HF Trainer default
    print(features.tolist(), labels.tolist(), features.device)
dist.init_process_group(init_method="file://" + {store!r}, rank=0, world_size=1)
total = torch.arange(3.0)
dist.all_reduce(total)
print(dist.get_backend(), dist.get_world_size(), total.tolist())
from torch.distributed.fsdp import fully_shard  # FSDP2's default mesh: it was built on neuron

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
fully_shard(model)
model(torch.randn(5, 4)).sum().backward()
print([p.grad.full_tensor().sum().item() for p in model.parameters()], next(model.parameters()).device)
dist.destroy_process_group()
"""


def _run(tmp_path, name: str, autoload: str) -> subprocess.Popen:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": autoload}
    script = SCRIPT.format(store=str(tmp_path / f"{name}.store"))
    return subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_cpu_script_prints_the_same_with_and_without_trnsim(tmp_path):
    with_trnsim, without = _run(tmp_path, "with", "1"), _run(tmp_path, "without", "0")
    outputs = [process.communicate(timeout=120) for process in (with_trnsim, without)]
    for process, (_, stderr) in zip((with_trnsim, without), outputs, strict=True):
        assert process.returncode == 0, stderr
    assert outputs[0][0] == outputs[1][0]
    assert outputs[0][0].splitlines() == [
        "[[0.0, 1.0], [2.0, 3.0]] [0, 1] cpu", "[[4.0, 5.0], [6.0, 7.0]] [2, 3] cpu",
        "undefined 1 [0.0, 1.0, 2.0]", outputs[1][0].splitlines()[-1]]
    assert outputs[0][0].splitlines()[-1].endswith(" cpu")


def test_fully_shard_without_a_mesh_keeps_a_neuron_model_on_neuron(tmp_path):
    """The default mesh follows the model: a neuron model stays on neuron under any backend."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    import trnsim.torch  # noqa: F401
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.Linear(8, 8).to("neuron")
        fully_shard(model)
        assert next(model.parameters()).device.type == "neuron"
        assert model(torch.ones(2, 8, device="neuron")).device.type == "neuron"
    finally:
        dist.destroy_process_group()
