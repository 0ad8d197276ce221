"""Collectives seen by the profiler: which c10d ops they are, over which ranks, and how long they
take on the emulated instance (`trnsim.system.collective_time`).

Collectives reach the device as c10d ops (`dist.all_reduce`, DDP, FSDP2, and DTensor's functional
collectives, which are built on them); a functional collective's wait is recorded too. Each is
recorded with the global ranks of its group, and timed as nccom-test would size it: the whole
buffer, the largest tensor of the call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from trnsim.errors import ConfigError, SpecError

NAMESPACES = ("c10d", "_c10d_functional")
# Overload packet -> the collective it runs (trnsim.system.OPS).
OPERATIONS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_reduce_coalesced_": "all_reduce",
    "allgather_": "all_gather", "_allgather_base_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall_": "all_to_all", "alltoall_base_": "all_to_all", "all_to_all_single": "all_to_all",
    "send": "permute", "recv_": "permute",
}
WAITS = ("wait_tensor",)
"""Ops after which the caller holds the collective's result: compute waits for it there."""


def is_collective(func) -> bool:
    return func.namespace in NAMESPACES


def group_of(args) -> tuple[int, ...]:
    """The global ranks of the group a c10d op runs over (its ProcessGroup argument, or the
    group name a functional collective carries); () when the op names none."""
    import torch.distributed as dist

    for value in args:
        if isinstance(value, torch.ScriptObject):
            return tuple(dist.get_process_group_ranks(dist.ProcessGroup.unbox(value)))
    for value in args[1:]:
        if isinstance(value, str) and value:
            try:
                group = dist.distributed_c10d._resolve_process_group(value)
            except (RuntimeError, ValueError):
                continue
            return tuple(dist.get_process_group_ranks(group))
    return ()


def _bytes(spec) -> int:
    if spec and isinstance(spec[0], tuple) and spec[0] and isinstance(spec[0][0], tuple):
        return sum(_bytes(item) for item in spec)  # a list of tensors
    shape, dtype = spec
    return int(torch.Size(shape).numel()) * torch.empty((), dtype=getattr(torch, dtype)).element_size()


def _dtype(specs) -> str:
    spec = specs[0]
    while isinstance(spec[0], tuple) and spec[0] and isinstance(spec[0][0], tuple):
        spec = spec[0]
    return spec[1]


def time_s(op: str, inputs: tuple, outputs: tuple, group: tuple[int, ...], instance: str,
           lnc: int | None) -> float | None:
    """Seconds one recorded collective takes, or None when it cannot be timed (not a modelled
    collective, no group, a dtype the model does not know)."""
    from trnsim import system

    name = op.split(".")[1]
    if name in WAITS:
        return 0.0
    operation, specs = OPERATIONS.get(name), inputs + outputs
    if operation is None or not group or not specs:
        return None
    if len(group) == 1:
        return 0.0
    size = max(_bytes(spec) for spec in specs)
    try:
        return system.collective_time(operation, size, len(group), instance=instance, dtype=_dtype(specs),
                                      lnc=lnc, group=list(group)).seconds
    except (ConfigError, SpecError):
        return None


def step_s(sequence, seconds: dict, collective: set, waits: set) -> float:
    """The block's time with collectives on their own queue: each starts when it is issued and the
    queue is free, compute goes on meanwhile and waits for them only at a `wait_tensor` (waits
    inside PyTorch's Work objects are not seen) and at the end of the block."""
    compute = comm = 0.0
    for key in sequence:
        if key in waits:  # first: a wait is a c10d op too, so `collective` may hold it as well
            compute = max(compute, comm)
        elif key in collective:
            comm = max(comm, compute) + seconds.get(key, 0.0)
        else:
            compute += seconds.get(key, 0.0)
    return max(compute, comm)


def lnc_setting() -> int | None:
    """The logical-core size ranks run with: NEURON_LOGICAL_NC_CONFIG, else the system's."""
    value = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    return int(value) if value in ("1", "2") else None


@dataclass(frozen=True)
class RankTime:
    """One rank's block: compute, communication, the part of it hidden behind compute, and the
    block's time with the two overlapped."""

    rank: int
    compute_s: float
    comm_s: float
    overlap_s: float
    step_s: float


@dataclass(frozen=True)
class JobReport:
    """Every rank of a job, the job's step (its slowest rank) and what the step costs: each rank is
    one (logical) core at its share of the instance's on-demand price."""

    ranks: tuple[RankTime, ...]
    usd_per_core_hour: float

    @property
    def step_s(self) -> float:
        return max(rank.step_s for rank in self.ranks)

    @property
    def cost_usd(self) -> float:
        return self.step_s * len(self.ranks) * self.usd_per_core_hour / 3600

    def table(self) -> str:
        lines = [f"job step {self.step_s * 1e3:.3f} ms over {len(self.ranks)} ranks, ${self.cost_usd:.3g}",
                 f"  {'rank':>4} {'compute ms':>11} {'comm ms':>9} {'overlap ms':>11} {'step ms':>9}"]
        lines += [f"  {r.rank:>4} {r.compute_s * 1e3:11.3f} {r.comm_s * 1e3:9.3f} {r.overlap_s * 1e3:11.3f} "
                  f"{r.step_s * 1e3:9.3f}" for r in self.ranks]
        return "\n".join(lines)


def job_report(report, group=None) -> JobReport:
    """Gather every rank's `report` (a collective over `group`) into the job's view."""
    import torch.distributed as dist

    mine = RankTime(dist.get_rank(), report.total_s, report.comm_s, report.overlap_s, report.step_s)
    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, mine, group=group)
    price = report._price() / report.cores_per_instance
    return JobReport(tuple(sorted(gathered, key=lambda r: r.rank)), price)
