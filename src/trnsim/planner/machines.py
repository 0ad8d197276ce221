"""An instance as a plan sees it: how many ranks it has (logical NeuronCores, or GPUs), and what
one rank holds and does, all read from trnsim.hardware; and what an hour of it costs."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from trnsim import hardware, system
from trnsim.errors import ConfigError, SpecError

PRECISIONS = {"bf16": "bf16", "bf16+fp32opt": "bf16", "bf16+sr": "bf16", "fp8": "fp8"}
"""Precision recipe -> the peak_flops class its matmuls run at."""


@dataclass(frozen=True)
class Price:
    """Dollars per hour of one instance, and where that figure comes from."""

    usd_per_hour: float | None
    source: str

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None


@dataclass(frozen=True)
class Machine:
    """One instance (or UltraServer) kind; `ranks` are logical NeuronCores at the system's LNC,
    or GPUs. `target` is the NeuronCore generation trnsim.cost takes (None for a GPU)."""

    spec: hardware.InstanceSpec
    target: str | None
    lnc: int
    ranks: int

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gpu(self) -> bool:
        return self.target is None

    @property
    def hbm_per_rank(self) -> float:
        return self.spec.hbm_bytes / self.ranks

    @property
    def hbm_bytes_per_s_per_rank(self) -> float:
        return self.spec.hbm_bytes_per_s / self.ranks

    def peak_per_rank(self, precision: str) -> float:
        """Dense peak FLOP/s of one rank for a precision recipe (bf16 if the instance has no fp8)."""
        wanted = PRECISIONS[precision]
        peaks = self.spec.peak_flops
        return peaks.get(wanted, peaks["bf16"]) / self.ranks

    def supports(self, precision: str) -> bool:
        return PRECISIONS[precision] in self.spec.peak_flops

    def price(self, override: float | None = None) -> Price:
        """The on-demand price from the catalog, the user's `override`, or unknown (never invented)."""
        if override is not None:
            if (not isinstance(override, numbers.Real) or isinstance(override, bool) or not override > 0
                    or not math.isfinite(override)):  # NaN fails `> 0`
                raise ConfigError(f"--price must be positive dollars per hour, got {override!r}")
            return Price(override, "given by the user")
        if self.spec.usd_per_hour is None:
            return Price(None, f"no public on-demand price for {self.name}; give one with --price")
        sourced = self.spec.source_of("usd_per_hour")
        return Price(self.spec.usd_per_hour, f"{sourced.source} ({sourced.date})")


def check_counts(minimum: int = 1, **counts) -> None:
    """ConfigError naming the first of a plan's `counts` that is not a whole number >= `minimum`."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{name}={value!r}: it must be a whole number of at least {minimum}")


def machine(name: str) -> Machine:
    """The Machine for an instance or UltraServer name; SpecError naming the choices otherwise."""
    try:
        spec = hardware.instance(name)
    except SpecError as error:
        raise SpecError(f"unknown instance {name!r}", hint=error.hint or
                        f"one of {', '.join(known_instances())}") from None
    if spec.chip is None:
        return Machine(spec, None, 1, spec.accelerators)
    target = next((alias for alias in spec.chip.aliases if alias in hardware.TARGETS), None)
    if target is None:
        raise SpecError(f"{spec.name}: its chip {spec.chip.name} has no cost model (trnsim.cost covers "
                        f"{', '.join(hardware.TARGETS)})")
    if not _has_network(spec.name):
        raise SpecError(f"{spec.name}: no chip network is recorded for it, so its collectives cannot be "
                        f"timed and it cannot be planned", hint=f"one of {', '.join(known_instances())}")
    lnc = _lnc(spec)
    return Machine(spec, target, lnc, spec.cores // lnc)


def _lnc(spec: hardware.InstanceSpec) -> int:
    """Logical-core size: the catalog's logical_cores, else the fabric's default, else 1."""
    if spec.logical_cores:
        return spec.cores // spec.logical_cores
    try:
        return system.fabric(spec.name).default_lnc
    except SpecError:
        return 1


def known_instances() -> tuple[str, ...]:
    """Instances a plan can run on: Neuron ones with a cost model, and the GPU instances."""
    names = []
    for spec in hardware.instances():
        chip_ok = spec.chip is not None and any(a in hardware.TARGETS for a in spec.chip.aliases)
        if (chip_ok and _has_network(spec.name)) or spec.kind == "gpu":
            names.append(spec.name)
    return tuple(names)


def _has_network(name: str) -> bool:
    """Whether the catalog records the system's chip network (its collectives' model)."""
    try:
        system.fabric(name)
    except SpecError:
        return False
    return True
