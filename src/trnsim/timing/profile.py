"""What a timeline means: latency, engine busy time, DMA traffic, FLOPs and utilization, hot spots.

    >>> timeline = schedule(trace, "trn1")
    >>> summary = summarize(timeline)
    >>> summary.latency_s, summary.hfu, summary.engines["tensor"].busy_fraction

Utilization follows the Neuron profiler's definitions: HFU is the FLOPs the Tensor Engine
actually executed (every matmul of the trace, 2*K*M*N) over the peak of the physical cores the
launch ran on (two for a logical core of LNC=2) for those dtypes in the kernel's latency; MFU
is the same with the model's FLOPs, which only the caller knows (`model_flops=`), so it is None
unless given. Both are None when the documentation publishes no
peak for a rate the kernel uses (e.g. fp8 double-row on trn3): `unpublished_peaks` names it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from trnsim.core.isa import DMA, MATMUL, Engine, Opcode
from trnsim.core.trace import Instruction, Trace
from trnsim.errors import ConfigError
from trnsim.hardware.specs import CoreSpec
from trnsim.timing.costs import core_spec, dma_bytes, matmul_values_per_item
from trnsim.timing.schedule import Timeline, lane_name, schedule

_PEAK_CLASS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "tfloat32": "tf32",
               "float8_e4m3": "fp8", "float8_e5m2": "fp8", "float8_e4m3fn": "fp8"}
"""Matmul input dtype -> key of `CoreSpec.peak_flops`; MX (x4) dtypes use "mxfp8"."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineUse:
    """How busy one engine (or all DMA queues together) was."""

    name: str
    instructions: int
    busy_s: float
    busy_fraction: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Hotspot:
    """Time spent by one kernel line on one opcode/engine, or one instruction of the critical path."""

    opcode: str
    engine: str
    where: str
    count: int
    total_s: float


@dataclass(frozen=True, kw_only=True)
class Summary:
    """The profile of one kernel on one target."""

    target: str
    core: str
    latency_s: float
    instructions: int
    engines: MappingProxyType
    dma_bytes: int
    dma_bytes_per_s: float
    flops: float
    peak_flops_per_s: float | None
    hfu: float | None
    mfu: float | None
    unpublished_peaks: tuple[str, ...]
    critical_path_s: float
    critical_path: tuple[Hotspot, ...]
    top: tuple[Hotspot, ...]

    def as_dict(self) -> dict:
        """Plain data for JSON."""
        return {
            "target": self.target, "core": self.core, "latency_s": self.latency_s,
            "instructions": self.instructions, "dma_bytes": self.dma_bytes,
            "dma_bytes_per_s": self.dma_bytes_per_s, "flops": self.flops,
            "peak_flops_per_s": self.peak_flops_per_s, "hfu": self.hfu, "mfu": self.mfu,
            "unpublished_peaks": list(self.unpublished_peaks),
            "critical_path_s": self.critical_path_s,
            "engines": {k: _fields(v) for k, v in self.engines.items()},
            "critical_path": [_fields(h) for h in self.critical_path],
            "top": [_fields(h) for h in self.top],
        }


def _fields(record) -> dict:
    return {name: getattr(record, name) for name in record.__slots__}


def peak_class(ins: Instruction) -> str:
    """The `peak_flops` key of the rate a matmul runs at: fp8 reaches its own (double) peak
    only in double-row mode; otherwise it streams at the 16-bit rate."""
    if ins.opcode is Opcode.MATMUL_MX:
        return "mxfp8"
    classes = {_PEAK_CLASS.get(r.dtype, "fp32") for r in ins.inputs[:2]}
    if "fp32" in classes:
        return "fp32"
    chosen = classes.pop() if len(classes) == 1 else "bf16"
    return "bf16" if chosen == "fp8" and ins.param("perf_mode") != "double_row" else chosen


def matmul_flops(ins: Instruction, core: CoreSpec) -> float:
    """2*K*M*N of one matmul; K counts both rows of a double-row pass (its [P, 2, F] layout holds
    two contraction rows per partition, so each free size counts its columns twice) and every
    value of an MX x4 item."""
    stationary, moving = ins.inputs[0], ins.inputs[1]
    per_partition = stationary.elements_per_partition * moving.elements_per_partition
    rows = 2 if ins.param("perf_mode") == "double_row" else 1
    return 2.0 * moving.partition_count * per_partition * matmul_values_per_item(ins, core) / rows


def _where(ins: Instruction) -> str:
    return str(ins.where) if ins.where is not None else "?"


def _group(timeline: Timeline, lane: int) -> str:
    """The engine a lane counts for: a core's DMA queues count as one engine ("dma"); its spill
    queue and collective stream ("dma_spill", "dma_cc") are engines of their own."""
    engine, core = timeline.lane_engines[lane]
    name = timeline.lanes[lane]
    if engine is Engine.DMA and name.rsplit(Engine.DMA.value, 1)[-1].isdigit():
        return lane_name(engine, core)
    return name


def _engine_use(timeline: Timeline) -> dict[str, EngineUse]:
    """Busy time per engine; the DMA queues of a core count as one engine of as many lanes, so
    its busy time is the mean per queue (never longer than the kernel)."""
    durations = timeline.duration_s
    latency = timeline.latency_s or 1.0
    groups: dict[str, list[int]] = {}
    for lane in range(len(timeline.lanes)):
        groups.setdefault(_group(timeline, lane), []).append(lane)
    uses = {}
    for name, lanes in groups.items():
        mask = np.isin(timeline.lane, lanes)
        busy = float(durations[mask].sum())
        uses[name] = EngineUse(name=name, instructions=int(mask.sum()), busy_s=busy,
                               busy_fraction=busy / (latency * len(lanes)))
    return uses


def _top(timeline: Timeline, count: int) -> tuple[Hotspot, ...]:
    """The kernel lines and opcodes that kept engines busy longest."""
    totals: dict[tuple, list] = {}
    rows = zip(timeline.trace, timeline.engine_names(), timeline.duration_s.tolist(), strict=True)
    for ins, engine, seconds in rows:
        entry = totals.setdefault((ins.opcode.value, engine, _where(ins)), [0, 0.0])
        entry[0] += 1
        entry[1] += seconds
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:count]
    return tuple(Hotspot(opcode=k[0], engine=k[1], where=k[2], count=v[0], total_s=v[1])
                 for k, v in ranked)


def _critical(timeline: Timeline, count: int) -> tuple[float, tuple[Hotspot, ...]]:
    """Busy seconds along the critical path and its longest steps."""
    path = timeline.critical_path()
    durations = timeline.duration_s
    trace = timeline.trace
    steps = sorted(path, key=lambda i: -durations[i])[:count]
    return float(durations[path].sum()) if path else 0.0, tuple(
        Hotspot(opcode=trace[i].opcode.value, engine=timeline.lanes[timeline.lane[i]],
                where=_where(trace[i]), count=1, total_s=float(durations[i])) for i in steps)


def summarize(timeline: Timeline, *, model_flops: float | None = None, top: int = 10) -> Summary:
    """The profile of a scheduled trace."""
    if not isinstance(timeline, Timeline):
        raise ConfigError(f"summarize takes a Timeline, got {type(timeline).__name__}",
                          hint="timeline = schedule(trace, target)")
    check_model_flops(model_flops)
    if type(top) is not int or top < 0:
        raise ConfigError(f"top={top!r}: the number of hotspots to list is a whole number >= 0")
    core, trace = timeline.core, timeline.trace
    latency = timeline.latency_s
    flops, busy_peak = 0.0, 0.0
    moved, unpublished, cores = 0, set(), trace.cores
    for ins in trace:
        if ins.opcode in MATMUL:
            work = matmul_flops(ins, core)
            peak = core.peak_flops.get(peak_class(ins))
            if peak is None:
                unpublished.add(peak_class(ins))
            else:
                busy_peak += work / peak
            flops += work
        elif ins.opcode in DMA:
            moved += dma_bytes(ins)
    if unpublished:  # no utilization against a peak the documentation does not give
        peak_flops = hfu = mfu = None
    else:
        busy_peak /= cores  # the work is shared by the launch's physical cores
        peak_flops = flops / busy_peak if busy_peak else cores * core.peak_flops["bf16"]
        hfu = busy_peak / latency if latency else 0.0
        mfu = model_flops / (peak_flops * latency) if model_flops is not None and latency else None
    path_s, path = _critical(timeline, top)
    return Summary(target=timeline.target, core=core.name, latency_s=latency,
                   instructions=len(trace), engines=MappingProxyType(_engine_use(timeline)),
                   dma_bytes=moved, dma_bytes_per_s=moved / latency if latency else 0.0,
                   flops=flops, peak_flops_per_s=peak_flops, hfu=hfu, mfu=mfu,
                   unpublished_peaks=tuple(sorted(unpublished)), critical_path_s=path_s,
                   critical_path=path, top=_top(timeline, top))


def check_model_flops(model_flops) -> None:
    if model_flops is None:
        return
    real = isinstance(model_flops, numbers.Real) and not isinstance(model_flops, bool)
    try:
        number = float(model_flops) if real else math.nan
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not math.isfinite(number) or math.copysign(1.0, number) < 0:
        raise ConfigError(f"model_flops={model_flops!r}: the model's FLOPs are a finite number >= 0",
                          hint="e.g. model_flops=2 * M * N * K for a matmul")


def target_list(targets) -> list[str | CoreSpec]:
    """`targets` as a list: one target (a name or a CoreSpec) or several; a core named twice
    (`trn2`, `TRN2`, its CoreSpec) is kept once. Anything else is a ConfigError naming it."""
    if isinstance(targets, (str, CoreSpec)):
        targets = [targets]
    if not isinstance(targets, Iterable):
        raise ConfigError(f"targets={targets!r}: give a target name, a CoreSpec or a list of them",
                          hint="e.g. targets=['trn1', 'trn2']")
    chosen, cores = [], []
    for target in targets:
        if not isinstance(target, (str, CoreSpec)):
            raise ConfigError(f"targets: {target!r} is not a target name or a CoreSpec",
                              hint="e.g. targets=['trn1', 'trn2']")
        core = core_spec(target)
        if core not in cores:
            cores.append(core)
            chosen.append(target)
    if not chosen:
        raise ConfigError("targets=[] names no target to time on",
                          hint="name one (targets='trn2'), or leave it out")
    return chosen


def profile_trace(trace: Trace, targets: str | CoreSpec | Iterable[str | CoreSpec] | None = None, *,
                  model_flops: float | None = None) -> dict[str, tuple[Timeline, Summary]]:
    """Time one trace on each target (one, or a list; default: its own) and summarize each."""
    check_model_flops(model_flops)
    results = {}
    for target in [trace.target] if targets is None else target_list(targets):
        timeline = schedule(trace, target)
        results[timeline.target] = (timeline, summarize(timeline, model_flops=model_flops))
    return results
