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

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from trnsim.errors import ConfigError, FormatError, UnsupportedError
from trnsim.numerics.formats import get_format
from trnsim.system import algorithms
from trnsim.system.algorithms import Stage, bus_factor
from trnsim.system.topology import MAX_RANKS, ChipGroup, Machine, Span

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute")
ALIASES = {"allr": "all_reduce", "allg": "all_gather", "redsct": "reduce_scatter", "alltoall": "all_to_all",
           "all2all": "all_to_all", "collective_permute": "permute", "sendrecv": "permute",
           "all_gatherv": "all_gather", "allgv": "all_gather", "alltoallv": "all_to_all"}
"""nccom-test's names ([S18]) for the operations; the variable-size ones are timed as their
fixed-size forms (even counts) and send-receive as a permute (bus factor 1)."""

DTYPE_ALIASES = {"fp8": "float8_e4m3", "fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
ALGORITHMS = ("mesh", "mesh1", "ring", "kangaring", "rdh", "hier", "flat")


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
    if not isinstance(dtype, str):
        raise ConfigError(f"dtype must be a dtype's name (a string such as 'bfloat16'), got {dtype!r}")
    try:
        fmt = get_format(DTYPE_ALIASES.get(dtype, dtype))
    except FormatError as error:
        raise ConfigError(f"unknown collective dtype {dtype!r}", hint=error.hint) from None
    if fmt.bits % 8:
        raise ConfigError(f"dtype {fmt.name} packs {fmt.bits}-bit elements; collectives move whole bytes")
    return fmt.name, fmt.bits // 8


def collective_time(op: str, size_bytes: int, ranks: int, instance: str = "trn2.48xlarge",
                    dtype: str = "bfloat16", algorithm: str | None = None, *, lnc: int | None = None,
                    nodes: int | None = None, group: Sequence[int] | None = None) -> CollectiveTime:
    """Predicted time of one collective of `size_bytes` (nccom-test's size: the whole buffer)
    over `ranks` logical cores of `instance`; ranks beyond one system span more over EFA.

    `algorithm` forces the algorithm inside a node (mesh, mesh1, ring, kangaring, rdh), or across
    nodes ("flat": one ring through all ranks); None lets the model choose as the runtime does.
    `lnc` defaults to the system's (2 on trn2/trn3).
    `nodes` spreads the ranks evenly over that many nodes (nccom-test's -N); `group` names the
    ranks of one replica group instead (every group of a collective runs at the same time).
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
    members = _members(machine, ranks, nodes, group)
    machine = Machine.of(instance, lnc=lnc, ranks=max(members) + 1)
    return time_on(machine, op, size_bytes, members, algorithm)


def _members(machine: Machine, ranks: int, nodes: int | None, group: Sequence[int] | None) -> list[int]:
    """The ranks taking part: `group` as given, or `ranks` spread over `nodes` (default: filled)."""
    if group is not None:
        if nodes is not None:
            raise ConfigError(f"group and nodes={nodes!r} both place the ranks",
                              hint="give one: a group's ranks are placed as the instance numbers them")
        if isinstance(group, str | bytes) or not hasattr(group, "__iter__"):
            raise ConfigError(f"group must be a list of rank numbers, got {group!r}")
        members = list(group)
        if len(members) != ranks or not all(not isinstance(r, bool) and hasattr(r, "__index__")
                                            and r >= 0 for r in members):
            raise ConfigError(f"group must list {ranks} distinct rank numbers >= 0, got {members!r}")
        members = [r.__index__() for r in members]
        if max(members) >= MAX_RANKS:
            raise ConfigError(f"group names rank {max(members)}, beyond the {MAX_RANKS:,} ranks "
                              f"trnsim models")
        return members
    if nodes is None:
        return list(range(ranks))
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1 or ranks % nodes:
        raise ConfigError(f"{ranks} ranks cannot be spread evenly over {nodes!r} nodes")
    per_node = ranks // nodes
    if per_node > machine.ranks_per_node:
        raise ConfigError(f"{per_node} ranks per node, but a {machine.fabric.name} node has "
                          f"{machine.ranks_per_node}")
    return [node * machine.ranks_per_node + rank for node in range(nodes) for rank in range(per_node)]


def time_on(machine: Machine, op: str, size_bytes: int, ranks: int | Sequence[int],
            algorithm: str | None = None) -> CollectiveTime:
    """`collective_time` on a machine already built (a fabric with other constants, when fitting)
    for `ranks` ranks from 0, or the listed ranks."""
    if isinstance(ranks, int) and ranks > MAX_RANKS:
        raise ConfigError(f"{ranks:,} ranks is more than trnsim models ({MAX_RANKS:,})")
    members = list(range(ranks)) if isinstance(ranks, int) else list(ranks)
    if len(members) == 1 or size_bytes == 0:
        return CollectiveTime(0.0, "none", 0.0, 0.0)
    span = _span(machine, tuple(members))
    stages = _stages(op, float(size_bytes), span, machine, algorithm)
    if span.node_group.ranks == 1:  # one rank per node: only the tiers between nodes act
        stages = [stage for stage in stages if stage.tier != "node"]
    seconds = sum(stage.seconds for stage in stages)
    name = stages[0].algorithm if len(stages) == 1 else "hier"
    algbw = size_bytes / seconds / 1e9
    return CollectiveTime(seconds, name, algbw, algbw * bus_factor(op, len(members)), tuple(stages))


@functools.lru_cache(maxsize=1024)
def _span(machine: Machine, members: tuple[int, ...]) -> Span:
    """Machine.span, remembered: planners ask about the same groups many times."""
    return machine.span(members)


def _stages(op: str, size: float, span: Span, machine: Machine, algorithm: str | None) -> list[Stage]:
    """The stages of `op` tier by tier: node, then the system's scale-up links, then EFA."""
    tiers = _tiers(span, machine)
    if algorithm in ("hier", "flat") and not tiers:
        raise UnsupportedError(f"{span.node_group.ranks} ranks in one node of {machine.fabric.name}: "
                               f"nothing spans nodes", what=f"algorithm {algorithm}")
    group = span.node_group
    if algorithm == "flat":
        if op not in algorithms.REDUCING | {"all_gather"}:
            raise UnsupportedError(f"a flat ring does not run {op}", what="algorithm flat")
        return [_flat_ring(op, size, span, machine, tiers)]
    node = _node_stage(op, size, group, machine, algorithm)
    if not tiers:
        return [node]
    if op == "all_reduce":
        below = [_node_stage("reduce_scatter", size, group, machine, algorithm),
                 *(_tier_stage(tier, "reduce_scatter", size) for tier in tiers[:-1])]
        above = [_tier_stage(tier, "all_gather", size) for tier in reversed(tiers[:-1])]
        return [*below, _tier_stage(tiers[-1], "all_reduce", size), *above,
                _node_stage("all_gather", size, group, machine, algorithm)]
    if op == "all_to_all":
        return [node, *(_tier_stage(tier, op, size * tier.ranks_below) for tier in tiers)]
    if op == "permute":  # one rank's buffer crosses a boundary: one chip's links, or its one NIC
        crossing = [_tier_stage(dataclasses.replace(tier, bytes_per_s=_one_chip(tier, machine)), op, size)
                    for tier in tiers]
        return [max([node, *crossing], key=lambda s: s.seconds)]
    return [node, *(_tier_stage(tier, op, size) for tier in tiers)]


def _flat_ring(op: str, size: float, span: Span, machine: Machine, tiers: list[_Tier]) -> Stage:
    """One ring through every rank of every node ([S17]: Neuron runs it only on trn1, for large
    buffers). Each chip's NIC carries one of the parallel rings, so a node boundary passes the
    node's whole link rate; every step waits for the slowest hop, the tier's latency."""
    ranks = span.node_group.ranks * span.nodes * span.systems
    ring = algorithms.node_stage(op, size, span.node_group, machine.fabric, machine.lnc, "ring")
    node_busbw = algorithms.bus_factor(op, span.node_group.ranks) * size / ring.seconds
    slowest = tiers[-1]
    busbw = min(node_busbw, slowest.efficiency * slowest.bytes_per_s)
    steps = (2 if op == "all_reduce" else 1) * (ranks - 1)
    latency = machine.fabric.model.fixed_latency_s + steps * slowest.latency_s
    return Stage("flat", op, "ring", latency + bus_factor(op, ranks) * size / busbw)


def _node_stage(op: str, size: float, group: ChipGroup, machine: Machine, algorithm: str | None) -> Stage:
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


def _tiers(span: Span, machine: Machine) -> list[_Tier]:
    """The tiers above one node that a group spans, bottom up."""
    fabric = machine.fabric
    per_node = span.node_group.ranks
    tiers = []
    if span.nodes > 1:
        chips = span.node_group.chips
        tiers.append(_Tier("scale-up", span.nodes, per_node, chips * fabric.scaleup_bytes_per_s_per_chip,
                           fabric.scaleup_latency_s, fabric.model.link_efficiency, fabric.model))
    if span.systems > 1:
        share = span.node_group.chips / fabric.chips_per_node  # EFA NICs are one per chip
        tiers.append(_Tier("efa", span.systems, per_node * span.nodes,
                           span.nodes * share * fabric.network_bytes_per_s_per_node,
                           fabric.network_latency_s, fabric.model.network_efficiency, fabric.model))
    return tiers


def _one_chip(tier: _Tier, machine: Machine) -> float:
    """What one chip sends at on a tier: its scale-up links, or its EFA NIC (one per chip [S15])."""
    fabric = machine.fabric
    if tier.name == "scale-up":
        return fabric.scaleup_bytes_per_s_per_chip
    return fabric.network_bytes_per_s_per_node / fabric.chips_per_node


def _tier_stage(tier: _Tier, op: str, size: float) -> Stage:
    return min((algorithms.tier_stage(tier.name, op, size, tier.members, tier.bytes_per_s, tier.latency_s,
                                      tier.efficiency, tier.model, name)
                for name in algorithms.tier_algorithms(op, tier.members)),
               key=lambda stage: stage.seconds)


_TIMED_ON: contextvars.ContextVar[Machine | None] = contextvars.ContextVar("trnsim_timed_on", default=None)


@contextlib.contextmanager
def timed_on(machine: Machine) -> Iterator[None]:
    """Time the COLLECTIVE instructions scheduled inside this block on `machine` (the system and LNC
    a multi-rank launch ran on) instead of the generation's default system."""
    token = _TIMED_ON.set(machine)
    try:
        yield
    finally:
        _TIMED_ON.reset(token)


def instruction_seconds(ins, core) -> float:
    """The time of one COLLECTIVE instruction of a kernel trace on `core`'s generation: its group's
    collective on the machine of the launch being timed (`timed_on`), else on the generation's
    system (launch.SYSTEM_OF_TARGET), over nccom-test's size (the whole buffer: all_gather's output,
    every other collective's input, summed over coalesced tensors). A permute is timed as the
    transfer between this rank and its peer (the rank it receives from, else the one it sends to;
    alone, it moves nothing)."""
    kind, group = ins.param("collective"), ins.param("group")
    regions = ins.outputs if kind == "all_gather" else ins.inputs
    size = sum(int(region.elements * region.dtype_bytes) for region in regions)
    members = list(group)
    if kind == "permute":
        peer = ins.param("peer")
        members = sorted({ins.param("rank")} | ({peer} if peer is not None else set()))
    machine = _launch_machine(core)
    if machine is None:
        instance = _system_of(core)
        return collective_time(kind, size, len(members), instance, "uint8", group=members).seconds
    machine = Machine(machine.fabric, machine.lnc, -(-(max(members) + 1) // machine.ranks_per_system))
    return time_on(machine, kind, size, members).seconds


def _launch_machine(core) -> Machine | None:
    """The machine of the launch whose trace is being timed (`timed_on`), when its cores are `core`."""
    machine = _TIMED_ON.get()
    if isinstance(machine, Machine) and machine.fabric.system.chip.core is core:
        return machine
    return None


def _system_of(core) -> str:
    """The multi-chip system a NeuronCore generation is timed on."""
    from trnsim.system.launch import SYSTEM_OF_TARGET
    from trnsim.system.topology import fabric

    for name in SYSTEM_OF_TARGET.values():
        if fabric(name).system.chip.core is core:
            return name
    raise UnsupportedError(f"collectives on {core.name} are not modelled", what="collective timing",
                           target=core.name, hint=f"targets: {', '.join(SYSTEM_OF_TARGET)}")
