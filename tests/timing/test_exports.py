"""Perfetto / Chrome trace JSON and the self-contained HTML report (rendered in headless Chromium)."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image
from timing_builders import compute_bound_trace

from trnsim.timing.perfetto import chrome_trace, write_atomic, write_chrome_trace
from trnsim.timing.profile import profile_trace
from trnsim.timing.report_html import OPCODE_COLOURS, report_html, timeline_data, write_report

CHROMIUM = Path("/usr/bin/chromium")
MATMULS = 8


@pytest.fixture(scope="module")
def results():
    return profile_trace(compute_bound_trace(tiles=MATMULS), ["trn1", "trn2"])


def test_chrome_trace_follows_the_trace_event_format(results, tmp_path):
    path = write_chrome_trace({k: v[0] for k, v in results.items()}, tmp_path / "k.json")
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 2 * len(results["trn1"][0].trace)
    for event in complete:
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["ts"], float | int) and event["ts"] >= 0
        assert isinstance(event["dur"], float | int) and event["dur"] > 0
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {names[(e["pid"], e["tid"])] for e in complete} >= {"tensor", "vector", "dma0"}
    processes = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert processes == ["trn1", "trn2"]


def test_event_times_are_the_timeline_in_microseconds(results):
    timeline = results["trn2"][0]
    events = [e for e in chrome_trace({"trn2": timeline})["traceEvents"] if e["ph"] == "X"]
    assert [e["ts"] for e in events] == pytest.approx((timeline.start_s * 1e6).tolist())
    assert [e["dur"] for e in events] == pytest.approx((timeline.duration_s * 1e6).tolist())


def test_atomic_write_leaves_no_temporary_file_when_it_fails(tmp_path):
    target = tmp_path / "out.json"
    write_atomic(target, "first")
    with pytest.raises(TypeError):
        write_atomic(target, None)  # not text: fails while writing
    assert target.read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_the_report_is_self_contained_with_one_bar_record_per_instruction(results):
    page = report_html(results, title="small <kernel>")
    assert "http://" not in page and "https://" not in page and "<link" not in page
    assert "small &lt;kernel&gt;" in page
    data = timeline_data(results["trn1"][0])
    assert len(data["start"]) == len(data["dur"]) == len(results["trn1"][0].trace)
    assert data["lanes"][:2] == ["tensor", "vector"]


def _hits(row: np.ndarray, color) -> np.ndarray:
    return np.all(np.abs(row[:, :3] - np.array(color)) < 0.01, axis=1)


def _runs(row: np.ndarray, color: tuple[float, float, float]) -> int:
    """Separate stretches of `color` along one pixel row."""
    hit = _hits(row, color)
    return int(np.count_nonzero(hit[1:] & ~hit[:-1]) + hit[0])


def _rgb(hex_color: str) -> tuple[float, float, float]:
    return tuple(int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))


def test_the_report_renders_one_bar_per_instruction_in_headless_chromium(results, tmp_path):
    if not CHROMIUM.exists():
        pytest.fail("headless Chromium is needed for this test: install Debian's package with "
                    "`apt-get install -y chromium` (expected at /usr/bin/chromium)")
    page = write_report({"trn1": results["trn1"]}, tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
               "--window-size=1300,2000", "--virtual-time-budget=5000", page.as_uri()]
    subprocess.run(command, check=True, capture_output=True, timeout=120,
                   env={**os.environ, "HOME": str(tmp_path)})
    pixels = image.imread(shot)
    assert (pixels[:, :, :3] < 0.9).any(axis=2).mean() > 0.02, "the screenshot is blank"
    # bars are coloured by opcode, one colour per opcode in every report
    dma, mm, copy = (_rgb(OPCODE_COLOURS[name]) for name in ("dma_copy", "nc_matmul", "tensor_copy"))
    canvas = _canvas(pixels)
    mm_rows, copy_rows, dma_rows = (_rows(canvas, c) for c in (mm, copy, dma))
    assert mm_rows and copy_rows and dma_rows, "bars are missing"
    assert _runs(canvas[mm_rows[len(mm_rows) // 2]], mm) == MATMULS
    assert _runs(canvas[copy_rows[len(copy_rows) // 2]], copy) == 1
    bands = 1 + sum(1 for a, b in zip(dma_rows[:-1], dma_rows[1:], strict=True) if b > a + 1)
    assert bands == len(set(results["trn1"][0].lane[[0, 1, -1]].tolist())), "one row per DMA queue"


def _canvas(pixels: np.ndarray) -> np.ndarray:
    """The timeline canvas (the first): the pixels between its top and bottom border lines (#bbb)."""
    border = [y for y in range(pixels.shape[0]) if _hits(pixels[y], _rgb("#bbbbbb")).sum() > 500]
    assert len(border) >= 2, "no timeline canvas in the screenshot"
    return pixels[border[0] + 1:border[1]]


def _rows(pixels: np.ndarray, color) -> list[int]:
    return [y for y in range(pixels.shape[0]) if _runs(pixels[y], color)]
