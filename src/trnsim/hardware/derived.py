"""Figures derived from catalog facts for side-by-side comparison (`trnsim compare`).

Each figure is computed from named fields of a chip or instance, so its provenance is the
sources of those fields. A figure whose inputs are not published is None, never guessed; an
announced chip gets its announced ratio as a note instead of a value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trnsim.errors import SpecError
from trnsim.hardware.specs import ChipSpec, InstanceSpec, Sourced

PFLOPS = 10**15
TB_PER_S = 10**12
GIB = 2**30


@dataclass(frozen=True, kw_only=True, slots=True)
class Figure:
    """One derived (or copied) number for one chip or instance, with the facts it rests on."""

    key: str
    label: str
    value: float | None
    unit: str
    inputs: tuple[tuple[str, Sourced], ...] = ()
    note: str = ""


def _flops(spec, dtype: str) -> float | None:
    return spec.peak_flops.get(dtype)


def _fp8_key(spec) -> str:
    """Plain FP8 where published, else MXFP8 (Trainium3 publishes no plain FP8 peak)."""
    return "fp8" if "fp8" in spec.peak_flops or "mxfp8" not in spec.peak_flops else "mxfp8"


def _price(spec) -> float | None:
    return getattr(spec, "usd_per_hour", None)


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or bottom is None else top / bottom


@dataclass(frozen=True, slots=True)
class Rule:
    """How one figure is made: its label and unit, the fields it reads, and the arithmetic."""

    label: str
    unit: str
    reads: Callable[[object], tuple[str, ...]]
    compute: Callable[[object], float | None]


def _fp8_fields(spec) -> tuple[str, ...]:
    return (f"peak_flops.{_fp8_key(spec)}",)


FIGURES: dict[str, Rule] = {
    "accelerators": Rule("Chips / GPUs", "", lambda s: ("accelerators",),
                         lambda s: getattr(s, "accelerators", None)),
    "bf16_pflops": Rule("Dense BF16", "PFLOPS", lambda s: ("peak_flops.bf16",),
                        lambda s: _ratio(_flops(s, "bf16"), PFLOPS)),
    "fp8_pflops": Rule("Dense FP8", "PFLOPS", _fp8_fields, lambda s: _ratio(_flops(s, _fp8_key(s)), PFLOPS)),
    "hbm_gib": Rule("HBM", "GiB", lambda s: ("hbm_bytes",), lambda s: _ratio(s.hbm_bytes, GIB)),
    "hbm_tb_per_s": Rule("HBM bandwidth", "TB/s", lambda s: ("hbm_bytes_per_s",),
                         lambda s: _ratio(s.hbm_bytes_per_s, TB_PER_S)),
    "usd_per_hour": Rule("On-demand price", "$/h", lambda s: ("usd_per_hour",), _price),
    "usd_per_bf16_pflops_hour": Rule("$ per BF16 PFLOPS-hour", "$",
                                     lambda s: ("usd_per_hour", "peak_flops.bf16"),
                                     lambda s: _ratio(_price(s), _ratio(_flops(s, "bf16"), PFLOPS))),
    "usd_per_tb_per_s_hour": Rule("$ per TB/s-hour", "$", lambda s: ("usd_per_hour", "hbm_bytes_per_s"),
                                  lambda s: _ratio(_price(s), _ratio(s.hbm_bytes_per_s, TB_PER_S))),
    "ridge_bf16": Rule("Ridge point BF16", "FLOP/B", lambda s: ("peak_flops.bf16", "hbm_bytes_per_s"),
                       lambda s: _ratio(_flops(s, "bf16"), s.hbm_bytes_per_s)),
    "ridge_fp8": Rule("Ridge point FP8", "FLOP/B", lambda s: (*_fp8_fields(s), "hbm_bytes_per_s"),
                      lambda s: _ratio(_flops(s, _fp8_key(s)), s.hbm_bytes_per_s)),
    "hbm_gib_per_usd": Rule("HBM GiB per $/h", "GiB·h/$", lambda s: ("hbm_bytes", "usd_per_hour"),
                            lambda s: _ratio(_ratio(s.hbm_bytes, GIB), _price(s))),
}
"""Comparison figures in display order."""

# Which figure an announced ratio speaks about (ratio key in chips.toml -> figure key).
_ANNOUNCED = {"fp8_flops": "fp8_pflops", "hbm_bytes_per_s": "hbm_tb_per_s"}


def figures(spec: ChipSpec | InstanceSpec) -> dict[str, Figure]:
    """Every comparison figure of one chip or instance, keyed as in FIGURES."""
    if not isinstance(spec, ChipSpec | InstanceSpec):
        raise SpecError(f"figures(spec) takes a chip or an instance (hardware.chip(...) or "
                        f"hardware.instance(...)), got {type(spec).__name__} {getattr(spec, 'name', spec)!r}")
    result = {}
    for key, rule in FIGURES.items():
        inputs = tuple((name, spec.sources[name]) for name in rule.reads(spec) if name in spec.sources)
        result[key] = Figure(key=key, label=rule.label, unit=rule.unit, value=rule.compute(spec),
                             inputs=inputs, note=_label(spec, key))
    return result


def _label(spec, key: str) -> str:
    """A note saying why a figure is missing or what it stands for."""
    if getattr(spec, "announced", False):
        for ratio_key, figure_key in _ANNOUNCED.items():
            if figure_key == key and ratio_key in spec.announced_ratios:
                ratio = spec.announced_ratios[ratio_key]
                return f"announced: {ratio:g}x {spec.relative_to.name}"
        return "not announced"
    if "usd_per_hour" in FIGURES[key].reads(spec):
        if isinstance(spec, ChipSpec):
            return "a chip has no price"
        if _price(spec) is None:
            return "no price found"
    if key == "usd_per_hour":
        return f"as of {spec.sources['usd_per_hour'].date}"
    if key in ("fp8_pflops", "ridge_fp8") and _fp8_key(spec) == "mxfp8":
        return "MXFP8"
    return ""
