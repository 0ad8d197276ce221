"""The machine hierarchy: rank -> logical core -> chip -> node -> system (instance or UltraServer)
-> cluster of systems joined by EFA, and the shape of the chip network a group of ranks uses.

Ranks are logical NeuronCores numbered as Neuron numbers them: rank r is logical core r % per-chip
of chip r // per-chip, chips fill a node's torus row by row, nodes fill a system, systems a
cluster. Under LNC=2 one rank is two physical cores.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from trnsim.errors import ConfigError, SpecError
from trnsim.hardware.catalog import default_catalog
from trnsim.hardware.specs import FabricSpec


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
        """The machine for `instance`; with `ranks`, as many systems as those ranks need."""
        spec = fabric(instance)
        lnc = spec.default_lnc if lnc is None else lnc
        if lnc not in (1, 2) or spec.system.chip.cores % lnc:
            raise ConfigError(f"LNC must be 1 or 2 on {spec.name}, got {lnc!r}")
        machine = cls(spec, lnc)
        if ranks is not None:
            if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
                raise ConfigError(f"ranks must be a positive whole number, got {ranks!r}")
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
        if not 0 <= rank < self.ranks:
            raise ConfigError(f"rank {rank} is outside this machine's {self.ranks} ranks")
        chip_index, core = divmod(rank, self.ranks_per_chip)
        node_index, chip = divmod(chip_index, self.fabric.chips_per_node)
        system, node = divmod(node_index, self.fabric.nodes)
        return RankPlace(rank=rank, system=system, node=node, chip=chip, core=core,
                         physical_cores=tuple(range(core * self.lnc, (core + 1) * self.lnc)))

    def group(self, ranks: int) -> ChipGroup:
        """The chip network the first `ranks` ranks of one node use (at most a node's worth)."""
        per_node = min(ranks, self.ranks_per_node)
        chips = -(-per_node // self.ranks_per_chip)
        return chip_group(self.fabric, chips, min(per_node, self.ranks_per_chip))


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
    ring_links: int
    mean_hops: float
    max_hops: int

    @property
    def ranks(self) -> int:
        return self.chips * self.ranks_per_chip


@functools.cache
def chip_group(spec: FabricSpec, chips: int, ranks_per_chip: int) -> ChipGroup:
    """The geometry of the first `chips` chips of a node of `spec`."""
    if chips == 1:
        return ChipGroup(1, ranks_per_chip, 0, 0, 0.0, 0)
    if spec.layout == "switch":
        return ChipGroup(chips, ranks_per_chip, 1, 1, 1.0, 1)
    coords = [_coords(index, spec.torus_dims) for index in range(chips)]
    degree = min(len(set(_neighbours(c, spec.torus_dims)) & set(coords)) for c in coords)
    hops = [_distance(a, b, spec.torus_dims) for a, b in itertools.permutations(coords, 2)]
    ring_links = degree if degree % 2 == 0 or degree == 1 else degree - 1
    return ChipGroup(chips, ranks_per_chip, degree, ring_links, sum(hops) / len(hops), max(hops))


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
