"""How long a collective takes: `collective_time`, the model behind `trnsim nccom`, the planner and
the torch device's process group.

A collective over ranks that span nodes is hierarchical, as Neuron runs it by default ([S17]):
an all-reduce is a reduce-scatter inside each node, an all-reduce between nodes (over the
UltraServer's links, then EFA between systems), and an all-gather inside each node; all-gather and
reduce-scatter run one stage per tier. In each stage the algorithm is the fastest the runtime may
pick there (algorithms.py), which reproduces its size-based choice (mesh for small buffers, RDH for
mid sizes, KangaRing for large ones [S16]). Times are predictions, never measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.errors import ConfigError, FormatError, UnsupportedError
from trnsim.numerics.formats import get_format
from trnsim.system import algorithms
from trnsim.system.algorithms import Stage, bus_factor
from trnsim.system.topology import Machine

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute")
ALIASES = {"allr": "all_reduce", "allg": "all_gather", "redsct": "reduce_scatter", "alltoall": "all_to_all",
           "all2all": "all_to_all", "collective_permute": "permute"}
"""nccom-test's short names ([S18]) for the operations."""

DTYPE_ALIASES = {"fp8": "float8_e4m3", "fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
ALGORITHMS = ("mesh", "mesh1", "ring", "kangaring", "rdh", "hier")


@dataclass(frozen=True)
class CollectiveTime:
    """A predicted collective: seconds, the algorithm (``hier`` across nodes, as nccom-test
    prints it), and nccom-test's algbw = size / time and busbw = algbw x bus factor, in GB/s.
    `stages` lists each tier's stage when the collective is hierarchical."""

    seconds: float
    algorithm: str
    algbw: float
    busbw: float
    stages: tuple[Stage, ...] = ()


def operation(op: str) -> str:
    """The canonical name of a collective operation, accepting nccom-test's short names."""
    name = ALIASES.get(op, op) if isinstance(op, str) else op
    if name not in OPS:
        raise ConfigError(f"unknown collective {op!r}",
                          hint=f"one of {', '.join(OPS)} (or {', '.join(ALIASES)})")
    return name


def dtype_bytes(dtype: str) -> tuple[str, int]:
    """(canonical name, bytes per element) of a dtype named as numpy, NKI or nccom-test name it."""
    try:
        fmt = get_format(DTYPE_ALIASES.get(dtype, dtype))
    except FormatError as error:
        raise ConfigError(f"unknown collective dtype {dtype!r}", hint=error.hint) from None
    if fmt.bits % 8:
        raise ConfigError(f"dtype {fmt.name} packs {fmt.bits}-bit elements; collectives move whole bytes")
    return fmt.name, fmt.bits // 8


def collective_time(op: str, size_bytes: int, ranks: int, instance: str = "trn2.48xlarge",
                    dtype: str = "bfloat16", algorithm: str | None = None, *,
                    lnc: int | None = None) -> CollectiveTime:
    """Predicted time of one collective of `size_bytes` (nccom-test's size: the whole buffer)
    over `ranks` logical cores of `instance`; ranks beyond one system span more over EFA.

    `algorithm` forces the algorithm inside a node (mesh, mesh1, ring, kangaring, rdh); None lets
    the model choose as the runtime does. `lnc` defaults to the system's (2 on trn2/trn3).
    """
    op = operation(op)
    _, element = dtype_bytes(dtype)
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ConfigError(f"size_bytes must be a whole number of bytes >= 0, got {size_bytes!r}")
    if size_bytes % element:
        raise ConfigError(f"size_bytes {size_bytes} is not a whole number of {dtype} elements")
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown collective algorithm {algorithm!r}",
                          hint=f"one of {', '.join(ALGORITHMS)}")
    machine = Machine.of(instance, lnc=lnc, ranks=ranks)
    return time_on(machine, op, size_bytes, ranks, algorithm)


def time_on(machine: Machine, op: str, size_bytes: int, ranks: int,
            algorithm: str | None = None) -> CollectiveTime:
    """`collective_time` on a machine already built (a fabric with other constants, when fitting)."""
    if ranks == 1 or size_bytes == 0:
        return CollectiveTime(0.0, "none", 0.0, 0.0)
    stages = _stages(op, float(size_bytes), ranks, machine, algorithm)
    seconds = sum(stage.seconds for stage in stages)
    name = stages[0].algorithm if len(stages) == 1 else "hier"
    algbw = size_bytes / seconds / 1e9
    return CollectiveTime(seconds, name, algbw, algbw * bus_factor(op, ranks), tuple(stages))


def _stages(op: str, size: float, ranks: int, machine: Machine, algorithm: str | None) -> list[Stage]:
    """The stages of `op` tier by tier: node, then the system's scale-up links, then EFA."""
    tiers = _tiers(ranks, machine)
    if algorithm == "hier" and not tiers:
        raise UnsupportedError(f"{ranks} ranks fit in one node of {machine.fabric.name}: nothing is "
                               "hierarchical", what="algorithm hier")
    node = _node_stage(op, size, ranks, machine, algorithm)
    if not tiers:
        return [node]
    if op == "all_reduce":
        below = [_node_stage("reduce_scatter", size, ranks, machine, algorithm)]
        for tier in tiers[:-1]:
            below.append(_tier_stage(tier, "reduce_scatter", size))
        top = _tier_stage(tiers[-1], "all_reduce", size)
        above = [_node_stage("all_gather", size, ranks, machine, algorithm),
                 *(_tier_stage(tier, "all_gather", size) for tier in tiers[:-1])]
        return [*below, top, *above]
    if op == "all_to_all":
        return [node, *(_tier_stage(tier, op, size * tier.ranks_below) for tier in tiers)]
    if op == "permute":
        return [max([node, *(_tier_stage(tier, op, size) for tier in tiers)], key=lambda s: s.seconds)]
    return [node, *(_tier_stage(tier, op, size) for tier in tiers)]


def _node_stage(op: str, size: float, ranks: int, machine: Machine, algorithm: str | None) -> Stage:
    group = machine.group(ranks)
    allowed = algorithms.node_algorithms(op, group)
    if algorithm not in (None, "hier"):
        if algorithm not in allowed:
            raise UnsupportedError(
                f"{algorithm} does not run {op} on {group.ranks} ranks over {group.chips} chip(s)",
                what=f"algorithm {algorithm}", hint=f"possible here: {', '.join(allowed)}")
        allowed = (algorithm,)
    elif len(allowed) > 1:
        allowed = algorithms.size_choice(allowed, size, machine.fabric.model)
    fabric, lnc = machine.fabric, machine.lnc
    return min((algorithms.node_stage(op, size, group, fabric, lnc, name) for name in allowed),
               key=lambda stage: stage.seconds)


@dataclass(frozen=True)
class _Tier:
    """Members (nodes or systems) joined by one kind of link, each sending at `bytes_per_s`."""

    name: str
    members: int
    ranks_below: int
    bytes_per_s: float
    latency_s: float
    efficiency: float
    model: object


def _tiers(ranks: int, machine: Machine) -> list[_Tier]:
    """The tiers above one node that `ranks` ranks span, bottom up."""
    fabric = machine.fabric
    if ranks <= machine.ranks_per_node:
        return []
    if ranks % machine.ranks_per_node:
        raise ConfigError(f"{ranks} ranks span nodes of {fabric.name} but are not a whole number of "
                          f"nodes ({machine.ranks_per_node} ranks each)")
    nodes = ranks // machine.ranks_per_node
    tiers = []
    in_system = min(nodes, fabric.nodes)
    if in_system > 1:
        tiers.append(_Tier("scale-up", in_system, machine.ranks_per_node,
                           fabric.chips_per_node * fabric.scaleup_bytes_per_s_per_chip,
                           fabric.scaleup_latency_s, fabric.model.link_efficiency, fabric.model))
    if nodes > fabric.nodes:
        if nodes % fabric.nodes:
            raise ConfigError(f"{ranks} ranks are not a whole number of {fabric.name} systems")
        tiers.append(_Tier("efa", nodes // fabric.nodes, machine.ranks_per_system,
                           fabric.nodes * fabric.network_bytes_per_s_per_node, fabric.network_latency_s,
                           fabric.model.network_efficiency, fabric.model))
    return tiers


def _tier_stage(tier: _Tier, op: str, size: float) -> Stage:
    return min((algorithms.tier_stage(tier.name, op, size, tier.members, tier.bytes_per_s, tier.latency_s,
                                      tier.efficiency, tier.model, name)
                for name in algorithms.tier_algorithms(op, tier.members)),
               key=lambda stage: stage.seconds)
