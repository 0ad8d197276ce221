"""Time of one collective stage under each algorithm Neuron uses ([S16] intra-node, [S17] inter-node).

A stage costs  fixed + steps x (step latency + hops x hop latency) + wire bytes / bus bandwidth,
where the wire bytes are nccom-test's bus factor times the buffer (so `bus bandwidth` is exactly
what nccom-test reports as busbw) and each algorithm's bus bandwidth comes from the links it drives:

- ring / KangaRing drive `ring_links` links per chip at the link rate (full utilisation); KangaRing
  pairs the ranks of a chip, halving the steps; ring is the fallback for groups with one rank per chip;
- RDH (recursive doubling/halving) takes log2(chips) steps plus an intra-chip stage, each with a
  handshake (`rdh_step_latency_s`), over partially over-subscribed links (`rdh_efficiency`); it
  needs a power-of-two chip count;
- mesh writes straight to every destination in 2 steps per phase, over routed links shared by
  `mean_hops` paths (`mesh_efficiency`); "mesh1", the single-step all-reduce, takes 1 step but
  sends N/2 times the bytes (every rank sends its whole buffer to every peer).

A chip's links carry the traffic of its ranks together, so the bound a chip's egress sets on each
rank's busbw is egress x (N-1)/N x C/(C-1) for C chips. Every rank is also bound by its own memory
system: its DMA queues, and its share of the chip's HBM, which reads and writes each byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnsim.hardware.specs import CollectiveModelSpec, FabricSpec
from trnsim.system.topology import ChipGroup

REDUCING = frozenset({"all_reduce", "reduce_scatter"})


def bus_factor(op: str, ranks: int) -> float:
    """nccom-test's busbw / algbw ([S18]), the same as nccl-tests'."""
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op == "permute":
        return 1.0
    return (ranks - 1) / ranks


@dataclass(frozen=True)
class Stage:
    """One collective over one tier of the machine: its algorithm and time."""

    tier: str
    op: str
    algorithm: str
    seconds: float


def node_algorithms(op: str, group: ChipGroup) -> tuple[str, ...]:
    """The algorithms Neuron can run for `op` on this group of ranks in one node."""
    if op == "permute":
        return ("ring",)
    if op == "all_to_all":
        return ("mesh",)
    names = ["mesh", "ring", "mesh1"] if op == "all_reduce" else ["mesh", "ring"]
    if group.chips == 1:
        return tuple(names)
    if group.ranks_per_chip > 1:
        names.append("kangaring")
    if group.chips & (group.chips - 1) == 0:
        names.append("rdh")
    return tuple(names)


def size_choice(allowed: tuple[str, ...], size: float, model: CollectiveModelSpec) -> tuple[str, ...]:
    """The algorithms the runtime picks from by buffer size ([S16]): mesh (or single-step mesh)
    for small buffers, RDH up to `rdh_max_bytes`, then KangaRing, with ring when KangaRing cannot
    run; RDH needs a power-of-two chip count, so without it KangaRing (or ring) takes its sizes.
    Below `mesh_max_bytes` the faster of mesh and that larger-buffer choice runs: mesh wins on
    well-connected chips up to the documented 1 MB and, in the measured table, up to 2 MiB; on a
    long ring (inf2's 12 chips) it loses earlier."""
    larger = [name for name in ("kangaring", "ring") if name in allowed][:1]
    if "rdh" in allowed and size <= model.rdh_max_bytes:
        larger = ["rdh"]
    larger = larger or list(allowed)
    if size < model.mesh_max_bytes:
        return tuple(name for name in allowed if name in ("mesh", "mesh1")) + tuple(larger)
    return tuple(larger)


def node_stage(op: str, size: float, group: ChipGroup, spec: FabricSpec, lnc: int,
               algorithm: str) -> Stage:
    """`op` over `size` bytes among the ranks of `group`, one node of `spec`, by `algorithm`."""
    model = spec.model
    ranks = group.ranks
    steps, hops, busbw = _shape(op, algorithm, group, spec, lnc, model)
    wire = bus_factor(op, ranks) * size
    if algorithm == "mesh1":
        wire *= ranks / 2
    step = model.step_latency_s + hops * spec.hop_latency_s * model.hop_latency_factor
    if algorithm == "rdh":  # each step is a handshake with a partner across the hypercube
        step += model.rdh_step_latency_s
    latency = model.fixed_latency_s + steps * step
    if op in REDUCING:
        latency += model.reduce_latency_s
    return Stage("node", op, algorithm, latency + wire / busbw)


def _shape(op: str, algorithm: str, group: ChipGroup, spec: FabricSpec, lnc: int,
           model: CollectiveModelSpec) -> tuple[float, float, float]:
    """(steps, hops per step, bus bandwidth) of one algorithm on one group."""
    phases = 2 if op == "all_reduce" else 1
    ranks, chips = group.ranks, group.chips
    memory = _memory_bound(op, algorithm, group, spec, lnc, model)
    scale = (ranks - 1) / ranks * chips / (chips - 1) if chips > 1 else 0.0
    ring_bound = min(memory, group.ring_links * spec.link_bytes_per_s * scale) if chips > 1 else memory
    ring_busbw = model.link_efficiency * ring_bound
    if op == "permute":  # one step to the successor: over one torus link, or all of a chip's links
        links = spec.links_per_chip if spec.layout == "switch" else 1  # to the switch
        link = min(memory, links * spec.link_bytes_per_s) if chips > 1 else memory
        return 1, 1, model.link_efficiency * link
    if algorithm == "ring":
        return phases * (ranks - 1), 1, ring_busbw
    if algorithm == "kangaring":
        return phases * ranks / 2, 1, ring_busbw
    if algorithm == "rdh":
        return phases * (math.log2(chips) + 1), 1, model.rdh_efficiency * ring_busbw
    mesh_bound = memory
    if chips > 1:
        mesh_bound = min(memory, group.degree * spec.link_bytes_per_s / group.mean_hops * scale)
    steps = 1 if algorithm == "mesh1" or op == "all_to_all" else 2 * phases
    return steps, max(group.max_hops, 1), model.mesh_efficiency * mesh_bound


def _memory_bound(op: str, algorithm: str, group: ChipGroup, spec: FabricSpec, lnc: int,
                  model: CollectiveModelSpec) -> float:
    """The busbw a rank's own memory system allows: its DMA queues move each bus byte once, and
    its share of the chip's HBM reads and writes it (2 touches; KangaRing saves some [S16])."""
    chip = spec.system.chip
    dma = lnc * chip.core.dma_bytes_per_s
    touches = 2.0
    if algorithm == "kangaring":
        phases = ("reduce_scatter", "all_gather") if op == "all_reduce" else (op,)
        touches *= 1 - sum(model.kangaring_hbm_saving[phase] for phase in phases) / len(phases)
    return min(dma, chip.hbm_bytes_per_s / group.ranks_per_chip / touches)


def tier_algorithms(op: str, members: int) -> tuple[str, ...]:
    """Algorithms between the nodes (or systems) of a tier: ring, mesh, and RDH on 2^k members."""
    names = ["ring", "mesh", "mesh1"] if op == "all_reduce" else ["ring", "mesh"]
    if members & (members - 1) == 0 and op != "all_to_all":
        names.append("rdh")
    return tuple(names)


def tier_stage(tier: str, op: str, size: float, members: int, member_bytes_per_s: float,
               latency_s: float, efficiency: float, model: CollectiveModelSpec, algorithm: str) -> Stage:
    """`op` over `size` bytes among `members` nodes (or systems), each sending at
    `member_bytes_per_s`, with `latency_s` per step ([S17]: about 15 us per EFA hop)."""
    phases = 2 if op == "all_reduce" else 1
    wire = bus_factor(op, members) * size
    busbw = efficiency * member_bytes_per_s
    if algorithm == "ring":
        steps = phases * (members - 1)
    elif algorithm == "rdh":
        steps, busbw = phases * math.log2(members), busbw * model.rdh_efficiency
    else:
        steps, busbw = (1 if algorithm == "mesh1" else phases), busbw * model.mesh_efficiency
        if algorithm == "mesh1":
            wire *= members / 2
    return Stage(tier, op, algorithm, steps * latency_s + wire / busbw)
