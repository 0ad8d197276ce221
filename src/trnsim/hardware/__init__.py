"""Hardware facts: NeuronCore generations, chips, instances and prices, each with its source.

    >>> from trnsim import hardware
    >>> core = hardware.core("trn2")
    >>> core.name, core.sbuf_bytes_per_partition
    ('NeuronCore-v3', 229376)
    >>> hardware.source_of(core, "sbuf_bytes_per_partition").written
    '224 KiB'

Every number lives in the TOML files under data/, next to its source; nothing else in trnsim
writes hardware numbers. A generation is a value you pass ("trn1", "trn2", "trn3").
"""

from __future__ import annotations

from pathlib import Path

from trnsim.errors import SpecError
from trnsim.hardware.catalog import Catalog, default_catalog, load_catalog
from trnsim.hardware.specs import (
    Alternative,
    ChipSpec,
    CoreSpec,
    CostSpec,
    Document,
    EngineSpec,
    InstanceSpec,
    InstructionCost,
    Sourced,
)

TARGETS = ("trn1", "inf2", "trn2", "trn3")
"""The NKI targets: names `core()` accepts that select a generation kernels can run on."""


def core(name: str) -> CoreSpec:
    """A NeuronCore generation by target ("trn2"), generation ("gen3", "v3") or full name."""
    return default_catalog().core(name)


def chip(name: str) -> ChipSpec:
    """A chip by short name ("trn2") or full name ("Trainium2")."""
    return default_catalog().chip(name)


def instance(name: str) -> InstanceSpec:
    """An instance or UltraServer by name ("trn2.48xlarge", "Trn2 UltraServer")."""
    return default_catalog().instance(name)


def cores() -> tuple[CoreSpec, ...]:
    return tuple(default_catalog().entries["core"].values())


def chips() -> tuple[ChipSpec, ...]:
    return tuple(default_catalog().entries["chip"].values())


def instances() -> tuple[InstanceSpec, ...]:
    return tuple(default_catalog().entries["instance"].values())


def targets_of(core: CoreSpec) -> tuple[str, ...]:
    """The NKI targets whose NeuronCore is `core` (by name)."""
    return tuple(target for target in TARGETS if default_catalog().core(target).name == core.name)


def has_lnc2(core: CoreSpec) -> bool:
    """Whether the NeuronCore runs as logical cores of two (LNC=2) on some system: a chip network
    of the catalog whose default LNC is 2 joins chips of that core."""
    catalog = default_catalog()
    for fabric in catalog.entries["fabric"].values():
        chip = catalog.instance(fabric.name).chip
        if fabric.default_lnc == 2 and chip is not None and chip.core.name == core.name:
            return True
    return False


def find(name: str) -> list:
    """Every instance, chip and core a name refers to; SpecError with close matches if none."""
    return default_catalog().find(name)


def source_of(spec, field: str) -> Sourced:
    """Where one field of a spec comes from ("peak_flops.bf16" for a key of a mapping)."""
    return spec.source_of(field)


def load(data_dir: str | Path) -> Catalog:
    """A catalog read from another data directory (an edited copy), checked like the default."""
    if not isinstance(data_dir, str | Path):
        raise SpecError(f"load(data_dir) takes a directory path, got {data_dir!r}")
    return load_catalog(data_dir)


__all__ = [
    "TARGETS", "Alternative", "Catalog", "ChipSpec", "CoreSpec", "CostSpec", "Document",
    "EngineSpec", "InstanceSpec", "InstructionCost", "Sourced", "chip", "chips", "core", "cores", "find",
    "instance", "instances", "load", "source_of",
]
