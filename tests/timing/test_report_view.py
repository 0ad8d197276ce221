"""The report a kernel author reads: one colour per opcode in every report, one time unit per page,
a time axis with ticks, instruction details, the critical path, DMA busy time per queue, and MFU
explained when it cannot be computed (checked in the page and in a headless-Chromium screenshot)."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image
from timing_builders import compute_bound_trace, dma_bound_trace

from trnsim.timing.perfetto import chrome_trace
from trnsim.timing.profile import profile_trace
from trnsim.timing.report_html import (
    MFU_UNKNOWN,
    OPCODE_COLOURS,
    page_unit,
    report_html,
    usage_series,
    write_report,
)

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def reports():
    """Two different kernels (compute-bound, DMA-bound), each timed on trn1, trn2 and trn3."""
    return {"compute": profile_trace(compute_bound_trace(tiles=8), ["trn1", "trn2", "trn3"]),
            "dma": profile_trace(dma_bound_trace(tiles=8), ["trn1", "trn2", "trn3"])}


def _screenshot(results, tmp_path: Path, name: str) -> np.ndarray:
    if not CHROMIUM.exists():
        pytest.fail("headless Chromium is needed for this test: `apt-get install -y chromium`")
    page = write_report(results, tmp_path / f"{name}.html", title=name)
    shot = tmp_path / f"{name}.png"
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-sync",
               "--disable-background-networking", "--disable-component-update", "--no-first-run",
               f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1300,3000",
               "--virtual-time-budget=5000", page.as_uri()]
    environment = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run(command, check=True, capture_output=True, timeout=120, env=environment)
    return image.imread(shot)[:, :, :3]


def _count(pixels: np.ndarray, hex_colour: str) -> int:
    rgb = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return int(np.all(np.abs(pixels - rgb) < 0.01, axis=2).sum())


def test_the_same_opcode_has_the_same_colour_in_two_reports(reports, tmp_path):
    compute = _screenshot(reports["compute"], tmp_path, "compute")
    dma = _screenshot(reports["dma"], tmp_path, "dma")
    assert _count(compute, OPCODE_COLOURS["dma_copy"]) > 50 and _count(dma, OPCODE_COLOURS["dma_copy"]) > 50
    assert _count(compute, OPCODE_COLOURS["nc_matmul"]) > 50
    assert len(set(OPCODE_COLOURS.values())) == len(OPCODE_COLOURS)


def test_the_screenshot_shows_the_usage_strips_side_by_side_targets(reports, tmp_path):
    pixels = _screenshot(reports["dma"], tmp_path, "usage")
    for colour in ("#3465a4", "#4e9a06"):  # DMA bandwidth and SBUF occupancy strips
        assert _count(pixels, colour) > 200, colour
    page = report_html(reports["dma"])
    assert page.count('<table class="compare">') == 1
    for target in ("trn1", "trn2", "trn3"):
        assert f'<td class="l">{target}</td>' in page


def test_usage_series_bandwidth_never_exceeds_the_queues_and_memory_fits(reports):
    timeline, summary = reports["dma"]["trn1"]
    usage = usage_series(timeline)
    core = timeline.core
    peak = core.dma_queues * core.dma_bytes_per_s_per_queue / 1e9
    assert 0.5 * peak < max(usage["dma_gbps"]) <= peak * (1 + 1e-9)
    moved = sum(usage["dma_gbps"]) * 1e9 * timeline.latency_s / len(usage["dma_gbps"])
    assert moved == pytest.approx(summary.dma_bytes, rel=1e-6)
    assert 0 < max(usage["sbuf"]) <= usage["sbuf_capacity"] == core.sbuf_bytes_per_partition


def test_dma_busy_in_the_engine_table_is_per_queue(reports):
    _timeline, summary = reports["dma"]["trn1"]
    page = report_html({"trn1": reports["dma"]["trn1"]})
    unit, scale = page_unit([summary.latency_s])
    engines = page.split("DMA: mean per queue")[1].split("</table>")[0]
    dma_busy = float(engines.split('<td class="l">dma</td>')[1].split("<td>")[2].split("<")[0])
    assert dma_busy * scale <= summary.latency_s


def test_the_screenshot_shows_axis_ticks_and_the_critical_path(reports, tmp_path):
    pixels = _screenshot({"trn2": reports["compute"]["trn2"]}, tmp_path, "one")
    black = np.all(pixels < 0.02, axis=2)            # the critical path's underlines (#000)
    assert black[:, 120:].sum() > 20, "no critical-path underline in the screenshot"
    axis_ink = np.all(np.abs(pixels - 0x22 / 255) < 0.02, axis=2)   # axis line and ticks (#222)
    axis = next(y for y in range(axis_ink.shape[0]) if axis_ink[y].sum() > 800)
    ticks = np.flatnonzero(axis_ink[axis + 1:axis + 6].all(axis=0))
    assert len(ticks) >= 3, "no ticks under the time axis"


def test_the_page_has_one_unit_queue_table_details_and_mfu_explained(reports):
    results = reports["dma"]
    page = report_html(results)
    unit, _seconds = page_unit([timeline.latency_s for timeline, _summary in results.values()])
    assert f'data-unit="{unit}"' in page and f"Times in {unit}." in page
    assert page.count(f"busy {unit}") >= 3 and " ms<" not in page.replace(f" {unit}<", "")
    assert page.count('<table class="queues">') == 3 and "<td class=\"l\">dma0</td>" in page
    assert MFU_UNKNOWN.replace("'", "&#x27;") in page
    assert '"critical":[' in page and '"details":[' in page and "<- " in page


def test_a_queue_row_is_never_longer_than_the_kernel(reports):
    timeline, _summary = reports["dma"]["trn1"]
    page = report_html({"trn1": reports["dma"]["trn1"]})
    cells = page.split('<table class="queues">')[1].split("</table>")[0].split("<td>")[1:]
    percents = [float(cell.split("%")[0]) for cell in cells if cell.split("<")[0].endswith("%")]
    assert percents and max(percents) <= 100.0
    used = {timeline.lanes[k] for k in set(timeline.lane.tolist()) if timeline.lanes[k].startswith("dma")}
    assert len(percents) == len(used) > 1


def test_perfetto_args_carry_engine_operands_and_bytes(reports):
    events = [e for e in chrome_trace({"k": reports["dma"]["trn1"][0]})["traceEvents"] if e["ph"] == "X"]
    dma = next(e for e in events if e["name"] == "dma_copy")
    assert dma["args"]["engine"] == "dma"
    assert " B" in dma["args"]["operands"] and "<-" in dma["args"]["operands"]
