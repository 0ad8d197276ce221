"""The machine hierarchy: rank -> logical core -> chip -> node -> system (instance or UltraServer)
-> cluster of systems joined by EFA, and the shape of the chip network a group of ranks uses.

Ranks are logical NeuronCores numbered as Neuron numbers them: rank r is logical core r % per-chip
of chip r // per-chip, chips fill a node's torus row by row, nodes fill a system, systems a
cluster. Under LNC=2 one rank is two physical cores.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from trnsim.errors import ConfigError, SpecError
from trnsim.hardware import has_lnc2
from trnsim.hardware.catalog import default_catalog
from trnsim.hardware.specs import FabricSpec

MAX_RANKS = 1 << 20
"""The most ranks a machine may hold: above an UltraCluster of "over 100,000" chips ([S3]) at 8
ranks a chip. More is refused (ConfigError) rather than building a list of a billion ranks."""


def rank_number(value: object, what: str = "rank") -> int:
    """`value` as a whole rank number (ints and numpy integers; not bools, floats or strings)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ConfigError(f"{what} must be a whole number, got {value!r}")
    return value.__index__()


def fabric(name: str) -> FabricSpec:
    """The chip network of a system by its instance or UltraServer name ("trn2.48xlarge")."""
    catalog = default_catalog()
    try:
        return catalog.fabric(name)
    except SpecError:
        known = ", ".join(sorted(catalog.entries["fabric"]))
        raise SpecError(f"no chip network is recorded for {name!r}",
                        hint=f"collectives are modelled on: {known}") from None


@dataclass(frozen=True)
class RankPlace:
    """Where one rank lives: its system, node in the system, chip in the node, logical core in the
    chip, and the physical cores of the chip that make it up."""

    rank: int
    system: int
    node: int
    chip: int
    core: int
    physical_cores: tuple[int, ...]


@dataclass(frozen=True)
class Machine:
    """One emulated cluster of `systems` copies of a fabric's system, with ranks under `lnc`."""

    fabric: FabricSpec
    lnc: int
    systems: int = 1

    @classmethod
    def of(cls, instance: str, *, lnc: int | None = None, ranks: int | None = None) -> Machine:
        """The machine for `instance`; with `ranks`, as many systems as those ranks need
        (at most MAX_RANKS). LNC=2 only where the core has it ([S14]: Trn2 and Trn3)."""
        spec = fabric(instance)
        lnc = spec.default_lnc if lnc is None else lnc
        if type(lnc) is not int or lnc not in (1, 2) or spec.system.chip.cores % lnc:
            raise ConfigError(f"LNC must be 1 or 2 on {spec.name}, got {lnc!r}")
        if lnc == 2 and not has_lnc2(spec.system.chip.core):
            raise ConfigError(f"LNC=2 does not exist on {spec.name} ({spec.system.chip.core.name}): "
                              f"logical cores of two are a Trn2/Trn3 feature [S14]", hint="use lnc=1")
        machine = cls(spec, lnc)
        if ranks is not None:
            if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
                raise ConfigError(f"ranks must be a positive whole number, got {ranks!r}")
            if ranks > MAX_RANKS:
                raise ConfigError(f"{ranks:,} ranks is more than trnsim models ({MAX_RANKS:,}, above an "
                                  f"UltraCluster of over 100,000 chips)")
            machine = cls(spec, lnc, -(-ranks // machine.ranks_per_system))
        return machine

    @property
    def ranks_per_chip(self) -> int:
        return self.fabric.system.chip.cores // self.lnc

    @property
    def ranks_per_node(self) -> int:
        return self.ranks_per_chip * self.fabric.chips_per_node

    @property
    def ranks_per_system(self) -> int:
        return self.ranks_per_node * self.fabric.nodes

    @property
    def ranks(self) -> int:
        return self.ranks_per_system * self.systems

    def place(self, rank: int) -> RankPlace:
        """Where `rank` lives in the hierarchy."""
        rank = rank_number(rank)
        if not 0 <= rank < self.ranks:
            raise ConfigError(f"rank {rank} is outside this machine's {self.ranks} ranks")
        chip_index, core = divmod(rank, self.ranks_per_chip)
        node_index, chip = divmod(chip_index, self.fabric.chips_per_node)
        system, node = divmod(node_index, self.fabric.nodes)
        return RankPlace(rank=rank, system=system, node=node, chip=chip, core=core,
                         physical_cores=tuple(range(core * self.lnc, (core + 1) * self.lnc)))

    def span(self, ranks: Sequence[int]) -> Span:
        """Where a replica group's ranks lie: the chips they use in a node, how many nodes of a
        system and how many systems. Neuron's groups are even (the same number of ranks on every
        chip they use, the same chips in every node); an uneven one is taken as its fullest node,
        every chip holding as many ranks as its fullest chip (an approximation: `even` is False)."""
        places = [self.place(rank) for rank in ranks]
        if not places:
            raise ConfigError("a replica group must list at least one rank, got none")
        if len(set(ranks)) != len(places):
            raise ConfigError(f"a replica group lists a rank twice: {sorted(ranks)}")
        by_node: dict[tuple[int, int], list[RankPlace]] = {}
        for place in places:
            by_node.setdefault((place.system, place.node), []).append(place)
        layouts = {tuple(sorted(Counter(p.chip for p in node).items())) for node in by_node.values()}
        per_chip = {count for layout in layouts for _, count in layout}
        fullest = max(layouts, key=len)
        systems = {system for system, _ in by_node}
        group = chip_group(self.fabric, tuple(chip for chip, _ in fullest), max(per_chip))
        even = len(layouts) == 1 and len(per_chip) == 1
        return Span(group, -(-len(by_node) // len(systems)), len(systems), even)


@dataclass(frozen=True)
class Span:
    """A replica group seen from the hierarchy: its chips in one node, nodes per system, systems."""

    node_group: ChipGroup
    nodes: int
    systems: int
    even: bool = True


@dataclass(frozen=True)
class ChipGroup:
    """The chips of one node a group of ranks spans, seen by a collective algorithm.

    `degree` is the fewest in-group links any chip has (the links a collective can drive in
    parallel); `ring_links` how many of them disjoint rings can use in each direction; hops are
    shortest paths through the whole node (routing may pass chips outside the group).
    """

    chips: int
    ranks_per_chip: int
    degree: int
    ring_links: float
    mean_hops: float
    max_hops: int

    @property
    def ranks(self) -> int:
        return self.chips * self.ranks_per_chip


@functools.cache
def chip_group(spec: FabricSpec, chips: tuple[int, ...], ranks_per_chip: int) -> ChipGroup:
    """The geometry of the chips (indices in a node of `spec`) a group uses."""
    if len(chips) == 1:
        return ChipGroup(1, ranks_per_chip, 0, 0, 0.0, 0)
    if spec.layout == "switch":  # every link of a chip goes to the switch, one hop from any chip
        links = spec.links_per_chip
        return ChipGroup(len(chips), ranks_per_chip, links, links, 1.0, 1)
    coords = [_coords(index, spec.torus_dims) for index in chips]
    degree = min(len(set(_neighbours(c, spec.torus_dims)) & set(coords)) for c in coords)
    hops = [_distance(a, b, spec.torus_dims) for a, b in itertools.permutations(coords, 2)]
    ring_links = degree if degree % 2 == 0 or degree == 1 else degree - 1
    if degree == 0:  # no two of the chips are neighbours: each ring step is routed over several hops
        degree, ring_links = 1, 1 / min(hops)
    return ChipGroup(len(chips), ranks_per_chip, degree, ring_links, sum(hops) / len(hops), max(hops))


def _coords(index: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major position of chip `index` in a torus of `dims`."""
    coords = []
    for size in reversed(dims):
        index, position = divmod(index, size)
        coords.append(position)
    return tuple(reversed(coords))


def _neighbours(coords: tuple[int, ...], dims: tuple[int, ...]) -> list[tuple[int, ...]]:
    found = []
    for axis, size in enumerate(dims):
        for step in (-1, 1):
            moved = list(coords)
            moved[axis] = (coords[axis] + step) % size
            if tuple(moved) != coords:
                found.append(tuple(moved))
    return found


def _distance(a: tuple[int, ...], b: tuple[int, ...], dims: tuple[int, ...]) -> int:
    return sum(min(abs(x - y), size - abs(x - y)) for x, y, size in zip(a, b, dims, strict=True))
