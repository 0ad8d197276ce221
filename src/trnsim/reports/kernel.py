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

from trnsim.core.trace import Trace
from trnsim.timing.perfetto import write_chrome_trace
from trnsim.timing.profile import Summary, profile_trace
from trnsim.timing.report_html import write_report
from trnsim.timing.schedule import Timeline

DEFAULT_TARGETS = ("trn1", "trn2", "trn3")


@dataclass(frozen=True)
class KernelProfile:
    """One kernel launch timed on several targets: target -> (timeline, summary)."""

    name: str
    trace: Trace
    results: Mapping[str, tuple[Timeline, Summary]]

    def summary(self, target: str) -> Summary:
        return self.results[target][1]

    def latency_s(self, target: str) -> float:
        return self.summary(target).latency_s

    def table(self) -> Table:
        """A rich table with one row per target."""
        return summary_table([self])

    def write(self, directory: str | Path, stem: str | None = None) -> tuple[Path, Path]:
        """`<stem>.html` (self-contained report) and `<stem>.json` (Perfetto) under `directory`."""
        stem = stem or safe_name(self.name)
        directory = Path(directory)
        page = write_report(self.results, directory / f"{stem}.html", title=self.name)
        timelines = {f"{self.name} {target}": pair[0] for target, pair in self.results.items()}
        events = write_chrome_trace(timelines, directory / f"{stem}.json")
        return page, events


def safe_name(name: str) -> str:
    """A file-name-safe version of a kernel name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "kernel"


def time_trace(name: str, trace: Trace, targets: Iterable[str] | None = None, *,
               model_flops: float | None = None) -> KernelProfile:
    """Schedule an existing trace on each target."""
    results = profile_trace(trace, list(targets or DEFAULT_TARGETS), model_flops=model_flops)
    return KernelProfile(name=name, trace=trace, results=results)


def profile(kernel, *args, targets: Iterable[str] | None = None,
            model_flops: float | None = None, **kwargs) -> KernelProfile:
    """Trace `kernel(*args, **kwargs)` without values and time it on each target.

    `args` may be arrays or `trnsim.nki.TensorSpec(shape, dtype)`; the trace is recorded for the
    first target (the instruction stream is the same on every generation unless the kernel
    branches on the target).
    """
    from trnsim import nki  # imported on use: loading the front end takes about half a second

    targets = list(targets or DEFAULT_TARGETS)
    trace = nki.trace(kernel, *args, target=targets[0], **kwargs)
    name = getattr(kernel, "__name__", type(kernel).__name__)
    return time_trace(name, trace, targets, model_flops=model_flops)


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
