"""Each parallel strategy trains a tiny GPT on CPU and on neuron, under one `neuron` process group.

Run by test_torch_distributed.py, or by hand: `torchrun --nproc_per_node=4 tests/torch/dist_parallel.py`.
Every rank prints `<strategy> <rank> equal` when its losses and parameters are bitwise the same on
both devices (`differ` otherwise), then `profile <rank> ok` when a profiled FSDP2 step reports
compute, communication, overlap and the job's price. The CPU runs go through gloo: the neuron
backend is gloo for CPU tensors as for neuron ones.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_gpt import Block

import trnsim.torch

VOCAB, D_MODEL, HEADS, SEQ, BATCH, STEPS = 64, 32, 2, 8, 4, 2


class TinyGPT(nn.Module):
    """Embedding, blocks, head; a pipeline stage keeps only its own part (the others are None)."""

    def __init__(self, layers: int = 2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList(Block(D_MODEL, HEADS) for _ in range(layers))
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, x):
        x = self.tok(x) if self.tok is not None else x
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def loss_of(logits, target):
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def batches(seed: int, device: str) -> list:
    data = torch.randint(0, VOCAB, (STEPS, BATCH, SEQ + 1), generator=torch.Generator().manual_seed(seed))
    return [(d[:, :-1].to(device), d[:, 1:].to(device)) for d in data]


def model_on(device: str) -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT().to(device)


def full(tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().cpu()


def train(model, data) -> list:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for idx, target in data:
        loss = loss_of(model(idx), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return losses + [full(p) for p in model.parameters()]


def ddp(device: str) -> list:
    model = DistributedDataParallel(model_on(device))
    results = train(model, batches(dist.get_rank(), device))
    directory = os.path.join(sys.argv[1], device)
    dcp.save({"model": model.module.state_dict()}, checkpoint_id=directory)
    loaded = TinyGPT().to(device)
    state = {"model": loaded.state_dict()}
    dcp.load(state, checkpoint_id=directory)
    loaded.load_state_dict(state["model"])
    return results + [p.detach().cpu() for p in loaded.parameters()]


def fsdp(device: str) -> list:
    model = model_on(device)
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return train(model, batches(dist.get_rank(), device))


def tensor_parallel(device: str) -> list:
    """TP over pairs of ranks (the MLP split by columns then rows), FSDP2 across the pairs."""
    mesh = init_device_mesh(device, (dist.get_world_size() // 2, 2), mesh_dim_names=("dp", "tp"))
    model = model_on(device)
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    if mesh["dp"].size() > 1:
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return train(model, batches(mesh["dp"].get_local_rank(), device))


def pipeline(device: str, pairs: list) -> list:
    """Two stages per pair of ranks: embedding and block 0, then block 1 and the head."""
    rank, model = dist.get_rank(), model_on(device)
    stage_index, group = rank % 2, pairs[rank // 2]
    if stage_index == 0:
        model.blocks, model.head = model.blocks[:1], None
    else:
        model.tok, model.blocks = None, model.blocks[1:]
    stage = PipelineStage(model, stage_index, 2, torch.device(device), group=group)
    schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=loss_of)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    results = []
    for idx, target in batches(rank // 2, device):
        opt.zero_grad()
        if stage_index == 0:
            schedule.step(idx)
        else:
            losses = []
            schedule.step(target=target, losses=losses)
            results += [loss.detach().cpu() for loss in losses]
        opt.step()
    return results + [p.detach().cpu() for p in model.parameters()]


def profiled_fsdp_step() -> bool:
    """One FSDP2 step under `trnsim.torch.profile`: compute, collectives, overlap and the job's price."""
    model, mesh = model_on("neuron"), init_device_mesh("neuron", (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    idx, target = batches(dist.get_rank(), "neuron")[0]
    with trnsim.torch.profile(target="trn2") as prof:
        loss_of(model(idx), target).backward()
    report = prof.report()
    job = report.job()
    if dist.get_rank() == 0:
        print(report.table(), job.table(), sep="\n", file=sys.stderr)
    return (report.total_s > 0 and report.comm_s > 0 and 0 <= report.overlap_s <= report.comm_s
            and report.step_s <= report.total_s + report.comm_s and len(job.ranks) == dist.get_world_size()
            and job.cost_usd > 0 and "c10d" not in str(report.untimed))


def main() -> None:
    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.neuron.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    pairs = [dist.new_group([2 * i, 2 * i + 1]) for i in range(world // 2)]
    strategies = {"ddp+dcp": ddp, "fsdp2": fsdp, "tp": tensor_parallel,
                  "pipeline": lambda device: pipeline(device, pairs)}
    for name, run in strategies.items():
        cpu, neuron = run("cpu"), run("neuron")
        same = len(cpu) == len(neuron) and all(torch.equal(a, b) for a, b in zip(cpu, neuron, strict=True))
        print(f"{name} {rank} {'equal' if same else 'differ'}", flush=True)
    print(f"profile {rank} {'ok' if profiled_fsdp_step() else 'wrong'}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) < 2:  # the checkpoint directory, shared by the ranks
        sys.argv.append(os.path.join(tempfile.gettempdir(), f"trnsim-dcp-{os.environ['MASTER_PORT']}"))
    main()
