"""Typed, read-only hardware specs. The dataclass fields double as the catalog's schema.

Each fact field carries metadata saying what it measures (its `dimension`), so the loader can
check units, signs and sources from this one table. Values are in SI units (bytes, bytes_per_s,
hz, flops, s, usd_per_hour). A value that is not published is None, and the spec is `partial`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from trnsim.errors import SpecError

EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class Alternative:
    """A value another source gives for the same quantity, kept beside the chosen one."""

    value: object
    source: str
    note: str = ""
    written: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Sourced:
    """One fact: its SI value, where it comes from, and what other sources say.

    `written` is the figure as the source writes it ("820 GiB/s"); `date` is set for prices.
    """

    value: object
    source: str
    alternatives: tuple[Alternative, ...] = ()
    note: str = ""
    written: str = ""
    date: str | None = None


_CITATION = re.compile(r"\[([^\[\]]+)\]")


def citations(source: str) -> tuple[str, ...]:
    """The document keys a source text cites, in order: "[S4][S10] derived: ..." -> ("S4", "S10")."""
    return tuple(dict.fromkeys(_CITATION.findall(source)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Document:
    """A public document figures cite by `key`: its title, the pages to open, and where it lives."""

    key: str
    title: str
    urls: tuple[str, ...]
    path: str = ""
    note: str = ""


def fact(dimension: str, *, optional: bool = False):
    """A sourced scalar: the data file writes it as `{ value = ..., source = ... }`."""
    return field(metadata={"kind": "fact", "dimension": dimension, "optional": optional})


def facts(dimension: str, *, keys: frozenset[str] | None = None, optional: bool = False):
    """A mapping of name -> sourced scalar (e.g. peak flops per dtype class)."""
    return field(metadata={"kind": "facts", "dimension": dimension, "keys": keys, "optional": optional})


def plain(kind: str, *, optional: bool = False, default=None):
    """A descriptive field that is not a measurement (names, aliases, notes): no source needed."""
    meta = {"kind": kind, "optional": optional}
    if default is None:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def nested(cls_name: str, *, optional: bool = False):
    """A mapping of name -> sub-spec (engines, instruction costs) built by the same loader."""
    return field(metadata={"kind": "nested_map", "cls": cls_name, "optional": optional})


def reference(kind: str, *, optional: bool = False):
    """The name of another catalog entry (a core, chip or cost table), resolved at load."""
    return field(metadata={"kind": "reference", "target": kind, "optional": optional})


DTYPE_CLASSES = frozenset({"fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "mxfp4", "int8"})
"""Keys of peak-flops mappings. fp8 covers Neuron's configurable FP8 (cFP8) on trn1/inf2."""

WIDTH_CLASSES = frozenset({"default", "bf16", "fp16", "fp8", "mx", "sparse"})
"""Keys of `EngineSpec.elements_per_cycle`: "default" applies to every dtype not listed."""


class _Spec:
    """Shared helpers for the spec classes (each has `sources`).

    Specs compare and hash by identity (eq=False): the catalog holds one object per entry, so
    they can key dicts and caches although their mappings are unhashable.
    """

    __slots__ = ()

    def source_of(self, name: str) -> Sourced:
        """Provenance of one field, or of one key of a mapping field as "field.key"."""
        try:
            return self.sources[name]
        except KeyError:
            raise SpecError(f"{type(self).__name__} {self.name!r} has no sourced field {name!r}",
                            hint=f"sourced fields: {', '.join(sorted(self.sources))}") from None


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class InstructionCost(_Spec):
    """Cycles of one instruction kind: max(floor_cycles, fixed_cycles + cycles_per_element * N).

    N is the number of elements per partition; `engine` is the engine whose clock counts them.
    """

    name: str = plain("text")
    engine: str = plain("text")
    formula: str = plain("text")
    fixed_cycles: float = fact("cycles")
    cycles_per_element: float = fact("factor")
    floor_cycles: float = fact("cycles")
    sources: Mapping[str, Sourced] = plain("sources")


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class CostSpec(_Spec):
    """Per-instruction cost constants for the timing model ([SDK-2.26] ISA docstrings, [S9])."""

    name: str = plain("text")
    matmul_min_ii_cycles: float = fact("cycles")
    matmul_fp32_factor: float = fact("factor")
    fast_load_stationary_speedup: float = fact("factor")
    min_ii_cycles: float = fact("cycles")
    static_overhead_cycles: float = fact("cycles")
    access_overhead_cycles: float = fact("cycles")
    stride_penalty_min_bytes: int = fact("bytes")
    stride_penalty_factor: float = fact("factor")
    dma_min_efficient_bytes_per_partition: int = fact("bytes")
    dma_saturating_bytes_per_partition: int = fact("bytes")
    dma_small_transfer_efficiency: float = fact("factor")
    dma_transpose_hbm_efficiency: float = fact("factor")
    dma_transpose_sbuf_efficiency: float = fact("factor")
    instructions: Mapping[str, InstructionCost] = nested("InstructionCost")
    sources: Mapping[str, Sourced] = plain("sources")


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class EngineSpec(_Spec):
    """One compute engine of a NeuronCore: clock and data-path width by dtype class."""

    name: str = plain("text")
    clock_hz: float = fact("hz")
    elements_per_cycle: Mapping[str, int] = facts("count", keys=WIDTH_CLASSES)
    peak_flops: Mapping[str, float] = facts("flops", keys=DTYPE_CLASSES, optional=True)
    rng_state_words: int = fact("count", optional=True)
    indirection_group_partitions: int = fact("count", optional=True)
    sources: Mapping[str, Sourced] = plain("sources")

    def width(self, dtype_class: str) -> int:
        """Elements per cycle for a dtype class, falling back to "default"."""
        return self.elements_per_cycle.get(dtype_class, self.elements_per_cycle["default"])


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class CoreSpec(_Spec):
    """A NeuronCore generation (NeuronCore-vN). `partial` cores leave unpublished facts None."""

    name: str = plain("text")
    generation: int = plain("int")
    aliases: tuple[str, ...] = plain("texts")
    partial: bool = plain("flag", default=False)
    note: str = plain("text", optional=True, default="")
    partitions: int = fact("count")
    sbuf_bytes_per_partition: int = fact("bytes")
    psum_bytes_per_partition: int = fact("bytes")
    psum_banks: int = fact("count")
    psum_bank_bytes: int = fact("bytes")
    matmul_max_contraction: int = fact("count")
    matmul_max_stationary_free: int = fact("count")
    matmul_max_moving_free: int = fact("count")
    matmul_max_moving_free_bf16_dst: int = fact("count")
    matmul_max_moving_free_fp32_dst: int = fact("count")
    matmul_tile_sizes: tuple[int, ...] = fact("counts")
    matmul_perf_modes: frozenset[str] = fact("names")
    bn_stats_max_free: int = fact("count")
    gpsimd_group_partitions: int = fact("count", optional=True)
    local_gather_max_indices: int = fact("count", optional=True)
    local_gather_max_elements_per_index: int = fact("count", optional=True)
    dtypes: frozenset[str] = fact("names")
    engines: Mapping[str, EngineSpec] = nested("EngineSpec")
    dma_queues: int = fact("count")
    dma_bytes_per_s_per_queue: float = fact("bytes_per_s")
    dma_peak_bytes_per_s_per_queue: float = fact("bytes_per_s")
    dma_fixed_latency_s: float = fact("s")
    dma_dge_instruction_s: float = fact("s", optional=True)
    profiler_clock_hz: float = fact("hz", optional=True)
    peak_flops: Mapping[str, float] = facts("flops", keys=DTYPE_CLASSES)
    peak_flops_sparse: Mapping[str, float] = facts("flops", keys=DTYPE_CLASSES, optional=True)
    costs: CostSpec = reference("cost_table")
    sources: Mapping[str, Sourced] = plain("sources")

    @property
    def sbuf_bytes(self) -> int | None:
        """Whole SBUF of the core: partitions x bytes per partition."""
        if self.partitions is None or self.sbuf_bytes_per_partition is None:
            return None
        return self.partitions * self.sbuf_bytes_per_partition

    @property
    def dma_bytes_per_s(self) -> float | None:
        """Achievable DMA bandwidth of the core: all queues together."""
        if self.dma_queues is None or self.dma_bytes_per_s_per_queue is None:
            return None
        return self.dma_queues * self.dma_bytes_per_s_per_queue


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class ChipSpec(_Spec):
    """A Neuron chip. An `announced` chip holds only ratios to `relative_to`, never measurements."""

    name: str = plain("text")
    aliases: tuple[str, ...] = plain("texts")
    partial: bool = plain("flag", default=False)
    announced: bool = plain("flag", default=False)
    note: str = plain("text", optional=True, default="")
    core: CoreSpec = reference("core")
    cores: int = fact("count")
    peak_flops: Mapping[str, float] = facts("flops", keys=DTYPE_CLASSES)
    peak_flops_sparse: Mapping[str, float] = facts("flops", keys=DTYPE_CLASSES, optional=True)
    hbm_bytes: int = fact("bytes")
    hbm_bytes_per_s: float = fact("bytes_per_s")
    dma_bytes_per_s: float = fact("bytes_per_s", optional=True)
    dma_engines: int = fact("count", optional=True)
    link: str = fact("text")
    link_bytes_per_s: float = fact("bytes_per_s", optional=True)
    cc_cores: int = fact("count", optional=True)
    relative_to: ChipSpec = reference("chip", optional=True)
    announced_ratios: Mapping[str, float] = facts("factor", optional=True)
    sources: Mapping[str, Sourced] = plain("sources")


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class InstanceSpec(_Spec):
    """An EC2 instance or UltraServer: Neuron (with `chip`) or a GPU instance for comparison."""

    name: str = plain("text")
    kind: str = plain("text")
    aliases: tuple[str, ...] = plain("texts", optional=True, default=())
    partial: bool = plain("flag", default=False)
    note: str = plain("text", optional=True, default="")
    chip: ChipSpec = reference("chip", optional=True)
    accelerator: str = plain("text")
    accelerators: int = fact("count")
    cores: int = fact("count", optional=True)
    logical_cores: int = fact("count", optional=True)
    vcpus: int = fact("count", optional=True)
    host_memory_bytes: int = fact("bytes", optional=True)
    peak_flops: Mapping[str, float] = facts("flops", keys=DTYPE_CLASSES)
    peak_flops_sparse: Mapping[str, float] = facts("flops", keys=DTYPE_CLASSES, optional=True)
    hbm_bytes: int = fact("bytes")
    hbm_bytes_per_s: float = fact("bytes_per_s")
    topology: str = fact("text", optional=True)
    link_bytes_per_s_per_chip: float = fact("bytes_per_s", optional=True)
    network_bytes_per_s: float = fact("bytes_per_s", optional=True)
    usd_per_hour: float = fact("usd_per_hour", optional=True)
    reserved_usd_per_hour: float = fact("usd_per_hour", optional=True)
    sources: Mapping[str, Sourced] = plain("sources")


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class CollectiveModelSpec(_Spec):
    """Constants of the collective time model (trnsim.system) that no document states: each is
    fitted on a published measurement (its source says which) and then used for every machine."""

    name: str = plain("text")
    fixed_latency_s: float = fact("s")
    step_latency_s: float = fact("s")
    hop_latency_factor: float = fact("factor")
    reduce_latency_s: float = fact("s")
    rdh_step_latency_s: float = fact("s")
    link_efficiency: float = fact("factor")
    mesh_efficiency: float = fact("factor")
    rdh_efficiency: float = fact("factor")
    network_efficiency: float = fact("factor")
    kangaring_hbm_saving: Mapping[str, float] = facts("factor")
    rdh_min_bytes: int = fact("bytes")
    mesh_max_bytes: int = fact("bytes")
    rdh_max_bytes: int = fact("bytes")
    sources: Mapping[str, Sourced] = plain("sources")


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class FabricSpec(_Spec):
    """How the chips of one system (an instance or UltraServer) are wired: the node's chip
    network (a torus of NeuronLinks or a NeuronSwitch), the links between its nodes, and EFA.

    Bandwidths are per direction: `link_bytes_per_s` is one link's, `scaleup_bytes_per_s_per_chip`
    a chip's links to other nodes together, `network_bytes_per_s_per_node` a node's EFA. `layout`
    is "torus" (links to grid neighbours, `torus_dims`) or "switch" (all `links_per_chip` links of
    a chip go to one switch, which reaches every other chip in one hop).
    """

    name: str = plain("text")
    aliases: tuple[str, ...] = plain("texts", optional=True, default=())
    note: str = plain("text", optional=True, default="")
    system: InstanceSpec = reference("instance")
    layout: str = plain("text")
    torus_dims: tuple[int, ...] = fact("counts", optional=True)
    chips_per_node: int = fact("count")
    nodes: int = fact("count")
    default_lnc: int = fact("count")
    links_per_chip: int = fact("count")
    link_bytes_per_s: float = fact("bytes_per_s")
    hop_latency_s: float = fact("s")
    scaleup_layout: str = plain("text", optional=True, default="")
    scaleup_bytes_per_s_per_chip: float = fact("bytes_per_s", optional=True)
    scaleup_latency_s: float = fact("s", optional=True)
    network_bytes_per_s_per_node: float = fact("bytes_per_s")
    network_latency_s: float = fact("s")
    model: CollectiveModelSpec = reference("collective_model")
    sources: Mapping[str, Sourced] = plain("sources")


SPEC_CLASSES = {cls.__name__: cls for cls in (InstructionCost, CostSpec, EngineSpec, CoreSpec,
                                              ChipSpec, InstanceSpec, CollectiveModelSpec, FabricSpec)}
