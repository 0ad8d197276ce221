"""Profile an NKI kernel on several generations: trace it once (shapes only), time it per target.

The kernel runs in trace-only mode (`trnsim.nki.trace`: no values computed), so production-size
kernels take seconds; the one trace is then scheduled for each target.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from trnsim import hardware
from trnsim.core.trace import Trace
from trnsim.errors import ConfigError, TrnsimError
from trnsim.hardware.specs import CoreSpec
from trnsim.timing.costs import core_spec
from trnsim.timing.perfetto import chrome_trace_json, write_all
from trnsim.timing.profile import Summary, check_model_flops, profile_trace, target_list
from trnsim.timing.report_html import report_html
from trnsim.timing.schedule import Timeline

DEFAULT_TARGETS = ("trn1", "trn2", "trn3")


@dataclass(frozen=True)
class KernelProfile:
    """One kernel launch timed on several targets: target -> (timeline, summary)."""

    name: str
    trace: Trace
    results: Mapping[str, tuple[Timeline, Summary]]

    def summary(self, target: str | CoreSpec) -> Summary:
        """The summary on `target`, as given to `profile` or as any name (or CoreSpec) of the
        same core."""
        if isinstance(target, str) and target in self.results:
            return self.results[target][1]
        try:
            wanted = core_spec(target) if isinstance(target, (str, CoreSpec)) else None
        except TrnsimError:  # not a core this catalog times: it was not profiled either
            wanted = None
        for timeline, summary in self.results.values():
            if wanted is not None and timeline.core == wanted:
                return summary
        raise ConfigError(f"{self.name} was not profiled on {target!r}",
                          hint=f"profiled on: {', '.join(self.results)}")

    def latency_s(self, target: str) -> float:
        return self.summary(target).latency_s

    def table(self) -> Table:
        """A rich table with one row per target."""
        return summary_table([self])

    def files(self, directory: str | Path, stem: str | None = None) -> dict[Path, str]:
        """The report's files by path: `<stem>.html` (self-contained report) and `<stem>.json`
        (Perfetto) under `directory`; the stem (default: the kernel's name) made file-name safe."""
        if stem is not None and not isinstance(stem, str):
            raise ConfigError(f"stem={stem!r}: the report's file name stem is text",
                              hint="e.g. stem='matmul'")
        stem = safe_name(self.name if stem is None else stem)
        directory = Path(directory)
        timelines = {f"{self.name} {target}": pair[0] for target, pair in self.results.items()}
        return {directory / f"{stem}.html": report_html(self.results, title=self.name),
                directory / f"{stem}.json": chrome_trace_json(timelines)}

    def write(self, directory: str | Path, stem: str | None = None) -> tuple[Path, Path]:
        """Write `files(directory, stem)`: both files or neither."""
        page, events = write_all(self.files(directory, stem))
        return page, events


def safe_name(name: str) -> str:
    """A file-name-safe version of a kernel name: letters (any script), digits, `_`, `.` and `-`,
    never a path or a hidden file."""
    return re.sub(r"[^\w.-]+", "_", name).lstrip(".") or "kernel"


def timed_targets(targets) -> list:
    """The targets to time on: one name or CoreSpec, or several (`target_list`), default trn1-trn3."""
    return list(DEFAULT_TARGETS) if targets is None else target_list(targets)


def time_trace(name: str, trace: Trace, targets=None, *, model_flops: float | None = None) -> KernelProfile:
    """Schedule an existing trace on each target."""
    results = profile_trace(trace, timed_targets(targets), model_flops=model_flops)
    return KernelProfile(name=name, trace=trace, results=results)


def profile(kernel, *args, targets=None, model_flops: float | None = None, **kwargs) -> KernelProfile:
    """Trace `kernel(*args, **kwargs)` without values and time it on each target.

    `args` may be arrays or `trnsim.nki.TensorSpec(shape, dtype)`; `targets` are names or
    CoreSpecs (`timed_targets`). The trace is recorded for the first target (the instruction
    stream is the same on every generation unless the kernel branches on the target).
    """
    from trnsim import nki  # imported on use: loading the front end takes about half a second

    check_model_flops(model_flops)  # before the kernel is traced
    if "target" in kwargs:  # nki.trace's own argument: it cannot reach the kernel
        raise ConfigError(f"target={kwargs['target']!r}: profile times on `targets`",
                          hint=f"targets={kwargs['target']!r}")
    targets = timed_targets(targets)
    trace = nki.trace(kernel, *args, target=_trace_target(targets[0]), **kwargs)
    name = getattr(kernel, "__name__", type(kernel).__name__)
    return time_trace(name, trace, targets, model_flops=model_flops)


def _trace_target(target) -> str:
    """The NKI target to trace for: a name as given, or the target whose core a CoreSpec is."""
    if isinstance(target, str):
        return target
    names = hardware.targets_of(target)
    if not names:
        raise ConfigError(f"core {target.name!r} is not the core of a target, so it cannot come first",
                          hint="put a target (trn1, trn2, trn3) first: the kernel is traced for it")
    return names[0]


def summary_table(profiles: Iterable[KernelProfile]) -> Table:
    """One row per (kernel, target): latency, busiest engine, DMA rate, HFU."""
    table = Table(title="trnsim kernel profile")
    for column in ("kernel", "target", "instr", "latency µs", "busiest engine", "DMA GB/s", "HFU"):
        table.add_column(column, justify="left" if column in ("kernel", "target") else "right",
                         no_wrap=True)
    for item in profiles:
        for target, (_, summary) in item.results.items():
            busiest = max(summary.engines.values(), key=lambda e: e.busy_fraction, default=None)
            engine = f"{busiest.name} {busiest.busy_fraction:.0%}" if busiest else "-"
            table.add_row(item.name, target, str(summary.instructions),
                          f"{summary.latency_s * 1e6:,.1f}", engine,
                          f"{summary.dma_bytes_per_s / 1e9:.1f}",
                          "-" if summary.hfu is None else f"{summary.hfu:.1%}")
    return table
