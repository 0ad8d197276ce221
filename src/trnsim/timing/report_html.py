"""A self-contained HTML report: summary tables and a zoomable timeline, no network access.

Everything is inline (styles, script, data), so the file opens anywhere, offline. The timeline
is drawn on a canvas (one row per engine and DMA queue, one bar per instruction, at least one
pixel wide), which stays responsive for traces of tens of thousands of instructions: the wheel
zooms, dragging pans, hovering shows the instruction (opcode, engine, operands, bytes, kernel
line). Every opcode has one colour in every report (`OPCODE_COLOURS`); the page uses one time
unit throughout, draws a time axis with ticks, underlines the critical path, lists each DMA
queue's busy time, and plots DMA bandwidth and SBUF/PSUM occupancy over the kernel.

    >>> write_report({"trn1": (timeline, summary)}, "report.html", title="matmul")
"""

from __future__ import annotations

import colorsys
import html
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import numpy as np

from trnsim.core.isa import DMA, Engine, Memory, Opcode
from trnsim.timing.costs import dma_bytes
from trnsim.timing.perfetto import operands_text, write_atomic
from trnsim.timing.profile import Summary
from trnsim.timing.schedule import Timeline

_ASSETS = resources.files("trnsim.timing") / "report_assets"


def _asset(name: str) -> str:
    """A stylesheet or script shipped with the package, to be inlined into the page."""
    return (_ASSETS / name).read_text(encoding="utf-8")


def _opcode_colour(position: int) -> str:
    """Golden-ratio hues: neighbouring opcodes of the enumeration get distant colours."""
    red, green, blue = colorsys.hls_to_rgb((position * 0.618034) % 1.0, 0.5, 0.6)
    return "#" + "".join(f"{round(c * 255):02x}" for c in (red, green, blue))


OPCODE_COLOURS = {opcode.value: _opcode_colour(position) for position, opcode in enumerate(Opcode)}
"""One colour per opcode, the same in every report (fixed by the opcode's place in `Opcode`)."""

UNITS = (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def page_unit(latencies_s) -> tuple[str, float]:
    """The one time unit of a page: the largest in which its longest latency is at least 1."""
    longest = max(latencies_s, default=0.0)
    chosen = UNITS[0]
    for unit in UNITS:
        if longest >= unit[1]:
            chosen = unit
    return chosen


def _piecewise(starts: np.ndarray, ends: np.ndarray, values: np.ndarray):
    """Event times and the running total after each: +value at its start, -value at its end."""
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([values, -values])
    order = np.argsort(times, kind="stable")
    return times[order], np.cumsum(deltas[order])


def _dma_rate(timeline: Timeline, edges: np.ndarray) -> np.ndarray:
    """Bytes per second the DMA queues moved in each slice between `edges` (the transfers the
    summary's DMA bytes count: a collective's traffic is the collective stream's), at most the
    core's rate (per physical core): a spill runs at that whole rate beside the kernel's queues,
    and the bandwidth it takes from them is not modelled, so the sum would show more than the
    core has."""
    rows = [(i, dma_bytes(ins)) for i, ins in enumerate(timeline.trace) if ins.opcode in DMA]
    if not rows:
        return np.zeros(len(edges) - 1)
    index = np.array([i for i, _ in rows])
    moved = np.array([b for _, b in rows], dtype=float)
    starts, ends = timeline.start_s[index], timeline.end_s[index]
    rates = moved / np.maximum(ends - starts, 1e-15)
    times, rate = _piecewise(starts, ends, rates)
    carried = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(times))])  # bytes moved by each event
    cumulative = np.interp(edges, times, carried)
    cores = len({core for _engine, core in timeline.lane_engines})
    return np.minimum(np.diff(cumulative) / np.diff(edges), timeline.core.dma_bytes_per_s * cores)


def _occupancy(timeline: Timeline, memory: Memory, middles: np.ndarray) -> np.ndarray:
    """Bytes per partition of `memory` held, on the fullest physical core: each placement of an allocation
    (its core, buffer and address; a spilled tile has two) holds its own bytes from its first use
    to its last, so a tile is counted once, and not at all while it is spilled to HBM."""
    spans: dict[tuple, list] = {}
    cores = timeline.trace.cores  # a grid's programs share them: program p on core p % cores
    times = zip(timeline.trace, timeline.start_s.tolist(), timeline.end_s.tolist(), strict=True)
    for ins, start, end in times:
        for region in ins.outputs + ins.inputs:
            if region.memory is memory:
                low, high = region.byte_span()
                key = (ins.core % cores, region.buffer, region.address_bytes)
                span = spans.setdefault(key, [start, end, low, high])
                span[0], span[1] = min(span[0], start), max(span[1], end)
                span[2], span[3] = min(span[2], low), max(span[3], high)
    held = np.zeros(len(middles))
    for core in {key[0] for key in spans}:
        first, last, low, high = (np.array(column) for column in zip(
            *(span for key, span in spans.items() if key[0] == core), strict=True))
        times, total = _piecewise(first, last, high - low + 1)
        position = np.searchsorted(times, middles, side="right") - 1
        held = np.maximum(held, np.where(position >= 0, total[np.maximum(position, 0)], 0.0))
    return held


def usage_series(timeline: Timeline, slices: int = 200) -> dict:
    """Over `slices` equal slices of the kernel: DMA bandwidth (GB/s), and SBUF and PSUM bytes
    per partition held by live allocations (first to last use), with each memory's capacity."""
    edges = np.linspace(0.0, timeline.latency_s or 1e-9, slices + 1)
    middles = (edges[:-1] + edges[1:]) / 2
    core = timeline.core
    return {"dma_gbps": (_dma_rate(timeline, edges) / 1e9).round(3).tolist(),
            "sbuf": _occupancy(timeline, Memory.SBUF, middles).tolist(),
            "psum": _occupancy(timeline, Memory.PSUM, middles).tolist(),
            "sbuf_capacity": core.sbuf_bytes_per_partition, "psum_capacity": core.psum_bytes_per_partition}


def timeline_data(timeline: Timeline) -> dict:
    """The timeline in compact columns (nanoseconds, table indices) for the page's script."""
    ops: dict[str, int] = {}
    wheres: dict[str, int] = {}
    details: dict[str, int] = {}
    op, where, detail = [], [], []
    for ins in timeline.trace:
        op.append(ops.setdefault(ins.opcode.value, len(ops)))
        where.append(wheres.setdefault(str(ins.where) if ins.where else "", len(wheres)))
        detail.append(details.setdefault(operands_text(ins), len(details)))
    start_ns = (timeline.start_s * 1e9).round(3)
    rank = timeline.lane_rank()
    names = [""] * len(rank)
    for lane, position in enumerate(rank):
        names[position] = timeline.lanes[lane]
    return {"lanes": names, "lane": [rank[lane] for lane in timeline.lane.tolist()],
            "start": start_ns.tolist(), "dur": (timeline.duration_s * 1e9).round(3).tolist(),
            "op": op, "where": where, "detail": detail, "ops": list(ops),
            "colors": [OPCODE_COLOURS[name] for name in ops], "wheres": list(wheres),
            "details": list(details), "critical": timeline.critical_path(), "end": timeline.latency_s * 1e9,
            "usage": usage_series(timeline)}


def _row(cells: list, header: bool = False) -> str:
    tag = "th" if header else "td"
    parts = [f'<{tag} class="l">{html.escape(str(cells[0]))}</{tag}>']
    parts += [f"<{tag}>{html.escape(str(c))}</{tag}>" for c in cells[1:]]
    return "<tr>" + "".join(parts) + "</tr>"


MFU_UNKNOWN = "- (needs the model's FLOPs, which only the caller knows: pass model_flops=)"


def _dma_queues_html(timeline: Timeline, unit: tuple[str, float]) -> str:
    """Busy time of each DMA queue that ran a transfer: one row per queue, never a sum of queues
    longer than the kernel."""
    name, scale = unit
    busy = np.bincount(timeline.lane, weights=timeline.duration_s, minlength=len(timeline.lanes))
    count = np.bincount(timeline.lane, minlength=len(timeline.lanes))
    latency = timeline.latency_s or 1.0
    rows = [_row(["DMA queue", "transfers", f"busy {name}", "busy %"], header=True)]
    rows += [_row([timeline.lanes[k], int(count[k]), f"{busy[k] / scale:.4g}", f"{busy[k] / latency:.1%}"])
             for k, (engine, _core) in enumerate(timeline.lane_engines) if engine is Engine.DMA and count[k]]
    return f"<table class=\"queues\">{''.join(rows)}</table>" if len(rows) > 1 else ""


def summary_html(summary: Summary, unit: tuple[str, float] = ("ms", 1e-3)) -> str:
    """The summary of one target as HTML tables, times in `unit` (name, seconds)."""
    name, scale = unit
    mfu = MFU_UNKNOWN if summary.mfu is None else f"{summary.mfu:.1%}"
    hfu = "-" if summary.hfu is None else f"{summary.hfu:.1%}"
    if summary.unpublished_peaks:
        hfu = mfu = f"- (no published {', '.join(summary.unpublished_peaks)} peak)"
    elif not summary.latency_s:
        hfu = mfu = "- (the kernel takes no time)"
    facts = [["latency", f"{summary.latency_s / scale:.4f} {name}"],
             ["instructions", summary.instructions],
             ["DMA bytes", f"{summary.dma_bytes:,}"],
             ["DMA achieved", f"{summary.dma_bytes_per_s / 1e9:.1f} GB/s"],
             ["FLOPs (Tensor Engine)", f"{summary.flops:.4g}"],
             ["HFU", hfu], ["MFU", mfu],
             ["critical path busy", f"{summary.critical_path_s / scale:.4f} {name}"]]
    rows = [_row(f) for f in facts]
    engines = [_row(["engine", "instructions", f"busy {name} (DMA: mean per queue)", "busy %"], header=True)]
    engines += [_row([e.name, e.instructions, f"{e.busy_fraction * summary.latency_s / scale:.4f}",
                      f"{e.busy_fraction:.1%}"]) for e in summary.engines.values()]
    top = [_row(["kernel line", "opcode", "engine", "count", f"total {name}"], header=True)]
    top += [_row([h.where, h.opcode, h.engine, h.count, f"{h.total_s / scale:.4f}"])
            for h in summary.top]
    return (f"<table>{''.join(rows)}</table><table>{''.join(engines)}</table>"
            f"<h3>Top instructions by time</h3><table>{''.join(top)}</table>")


def _over_capacity_html(usage: dict) -> str:
    """A visible warning for each memory the modelled schedule holds more of than the core has."""
    notes = [f"{name.upper()}: the modelled schedule holds up to {max(usage[name]):,.0f} B/partition, "
             f"more than the {usage[name + '_capacity']:,} the core has. The timeline runs loads ahead "
             "without waiting for the space they reuse (prefetch is unbounded: see docs/timing.md, "
             "Not modelled), so tiles at the same addresses overlap in time."
             for name in ("sbuf", "psum") if max(usage[name], default=0) > usage[name + "_capacity"]]
    return "".join(f'<p class="warn">{html.escape(note)}</p>' for note in notes)


def comparison_html(results: Mapping[str, tuple[Timeline, Summary]], unit: tuple[str, float]) -> str:
    """The targets side by side: latency, HFU and the busiest engine of each (several targets only)."""
    if len(results) < 2:
        return ""
    name, scale = unit
    rows = [_row(["target", "core", f"latency {name}", "HFU", "busiest engine"], header=True)]
    for label, (_timeline, summary) in results.items():
        busiest = max(summary.engines.values(), key=lambda e: e.busy_fraction, default=None)
        hfu = "-" if summary.hfu is None else f"{summary.hfu:.1%}"
        rows.append(_row([label, summary.core, f"{summary.latency_s / scale:.4f}", hfu,
                          "-" if busiest is None else f"{busiest.name} {busiest.busy_fraction:.0%}"]))
    return f'<h2>Side by side</h2><table class="compare">{"".join(rows)}</table>'


def report_html(results: Mapping[str, tuple[Timeline, Summary]], title: str = "trnsim") -> str:
    """The whole page for `results` (label -> (timeline, summary)), in one time unit."""
    unit = page_unit([timeline.latency_s for timeline, _summary in results.values()])
    sections, scripts = [], []
    for number, (label, (timeline, summary)) in enumerate(results.items()):
        data = timeline_data(timeline)
        warning = _over_capacity_html(data["usage"])
        data = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
        scripts.append(f'<script type="application/json" id="d{number}">{data}</script>')
        sections.append(f"<h2>{html.escape(label)} ({html.escape(summary.core)})</h2>"
                        f"{summary_html(summary, unit)}{_dma_queues_html(timeline, unit)}<h3>Timeline</h3>"
                        f'<canvas width="1200" data-src="d{number}"></canvas>'
                        "<h3>DMA bandwidth and on-chip memory held, over the kernel</h3>"
                        f'<canvas width="1200" height="150" data-usage="d{number}"></canvas>{warning}')
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_asset('report.css')}</style></head>"
            f'<body data-unit="{unit[0]}" data-unit-ns="{unit[1] * 1e9:g}">'
            f"<h1>{html.escape(title)}</h1><p>Times in {unit[0]}. Wheel: zoom. Drag: pan. "
            "Double-click: reset. Black underlines: the critical path.</p>"
            f"{comparison_html(results, unit)}"
            f"{''.join(sections)}<div id=\"tip\"></div>{''.join(scripts)}"
            f"<script>{_asset('report.js')}</script></body></html>")


def write_report(results: Mapping[str, tuple[Timeline, Summary]], path: str | Path,
                 title: str = "trnsim") -> Path:
    """Write the self-contained report for `results` to `path` (atomically)."""
    return write_atomic(path, report_html(results, title))
