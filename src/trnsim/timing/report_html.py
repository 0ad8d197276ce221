"""A self-contained HTML report: summary tables and a zoomable timeline, no network access.

Everything is inline (styles, script, data), so the file opens anywhere, offline. The timeline
is drawn on a canvas (one row per engine and DMA queue, one bar per instruction, at least one
pixel wide), which stays responsive for traces of tens of thousands of instructions: the wheel
zooms, dragging pans, hovering names the instruction and its kernel line.

    >>> write_report({"trn1": (timeline, summary)}, "report.html", title="matmul")
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from trnsim.timing.perfetto import write_atomic
from trnsim.timing.profile import Summary
from trnsim.timing.schedule import Timeline

_ASSETS = resources.files("trnsim.timing") / "report_assets"


def _asset(name: str) -> str:
    """A stylesheet or script shipped with the package, to be inlined into the page."""
    return (_ASSETS / name).read_text(encoding="utf-8")


def timeline_data(timeline: Timeline) -> dict:
    """The timeline in compact columns (nanoseconds, table indices) for the page's script."""
    ops: dict[str, int] = {}
    wheres: dict[str, int] = {}
    op, where = [], []
    for ins in timeline.trace:
        op.append(ops.setdefault(ins.opcode.value, len(ops)))
        where.append(wheres.setdefault(str(ins.where) if ins.where else "", len(wheres)))
    start_ns = (timeline.start_s * 1e9).round(3)
    rank = timeline.lane_rank()
    names = [""] * len(rank)
    for lane, position in enumerate(rank):
        names[position] = timeline.lanes[lane]
    return {"lanes": names, "lane": [rank[lane] for lane in timeline.lane.tolist()],
            "start": start_ns.tolist(), "dur": (timeline.duration_s * 1e9).round(3).tolist(),
            "op": op, "where": where, "ops": list(ops), "wheres": list(wheres),
            "end": timeline.latency_s * 1e9}


def _row(cells: list, header: bool = False) -> str:
    tag = "th" if header else "td"
    parts = [f'<{tag} class="l">{html.escape(str(cells[0]))}</{tag}>']
    parts += [f"<{tag}>{html.escape(str(c))}</{tag}>" for c in cells[1:]]
    return "<tr>" + "".join(parts) + "</tr>"


def summary_html(summary: Summary) -> str:
    """The summary of one target as HTML tables."""
    mfu = "-" if summary.mfu is None else f"{summary.mfu:.1%}"
    hfu = "-" if summary.hfu is None else f"{summary.hfu:.1%}"
    if summary.unpublished_peaks:
        hfu = f"- (no published {', '.join(summary.unpublished_peaks)} peak)"
    facts = [["latency", f"{summary.latency_s * 1e3:.4f} ms"],
             ["instructions", summary.instructions],
             ["DMA bytes", f"{summary.dma_bytes:,}"],
             ["DMA achieved", f"{summary.dma_bytes_per_s / 1e9:.1f} GB/s"],
             ["FLOPs (Tensor Engine)", f"{summary.flops:.4g}"],
             ["HFU", hfu], ["MFU", mfu],
             ["critical path busy", f"{summary.critical_path_s * 1e3:.4f} ms"]]
    rows = [_row(f) for f in facts]
    engines = [_row(["engine", "instructions", "busy ms", "busy %"], header=True)]
    engines += [_row([e.name, e.instructions, f"{e.busy_s * 1e3:.4f}", f"{e.busy_fraction:.1%}"])
                for e in summary.engines.values()]
    top = [_row(["kernel line", "opcode", "engine", "count", "total ms"], header=True)]
    top += [_row([h.where, h.opcode, h.engine, h.count, f"{h.total_s * 1e3:.4f}"])
            for h in summary.top]
    return (f"<table>{''.join(rows)}</table><table>{''.join(engines)}</table>"
            f"<h3>Top instructions by time</h3><table>{''.join(top)}</table>")


def report_html(results: Mapping[str, tuple[Timeline, Summary]], title: str = "trnsim") -> str:
    """The whole page for `results` (label -> (timeline, summary))."""
    sections, scripts = [], []
    for number, (label, (timeline, summary)) in enumerate(results.items()):
        data = json.dumps(timeline_data(timeline), separators=(",", ":")).replace("</", "<\\/")
        scripts.append(f'<script type="application/json" id="d{number}">{data}</script>')
        sections.append(f"<h2>{html.escape(label)} ({html.escape(summary.core)})</h2>"
                        f"{summary_html(summary)}<h3>Timeline</h3>"
                        f'<canvas width="1200" data-src="d{number}"></canvas>')
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_asset('report.css')}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>Wheel: zoom. Drag: pan. Double-click: reset.</p>"
            f"{''.join(sections)}<div id=\"tip\"></div>{''.join(scripts)}"
            f"<script>{_asset('report.js')}</script></body></html>")


def write_report(results: Mapping[str, tuple[Timeline, Summary]], path: str | Path,
                 title: str = "trnsim") -> Path:
    """Write the self-contained report for `results` to `path` (atomically)."""
    return write_atomic(path, report_html(results, title))
