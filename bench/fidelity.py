"""Fidelity of the timing model on published kernel timings, calibration and validation kept apart.

    python bench/fidelity.py [--quick] [--rows ID,ID,...]

Every row of src/trnsim/cost/data/published_timings.csv is a published latency with its source,
instance, dtype and shapes, what was measured (`latency` of the kernel, or one `instruction`'s
busy time), and a `fitted` column: "yes" where a constant of the model was fitted on it. Each
kernel runs in trace-only mode and is scheduled on the row's target. Prints one JSON object: MAPE
on held-out rows and on fitted rows, overall and per engine class (vector, dma, tensor), whether
each documented ordering between versions of a kernel holds, and every row.

An ordering is documented when two versions of one group differ by more than ORDER_MARGIN in
their published latencies; closer pairs are ties and are not checked. Rows whose kernel source is
missing (the SDK's mamba kernels come from the aws-neuron-sdk mirror or TRNSIM_LEGACY_KERNELS)
are listed as skipped. `--quick` leaves out rows whose trace takes more than a few seconds.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import matmul_tutorial as tutorial  # noqa: E402

import trnsim.nki as nki  # noqa: E402
import trnsim.nki.compat  # noqa: E402
import trnsim.nki.isa as nisa  # noqa: E402
import trnsim.nki.language as nl  # noqa: E402
from trnsim.timing.schedule import schedule  # noqa: E402

TABLE = ROOT / "src" / "trnsim" / "cost" / "data" / "published_timings.csv"
GOAL = 0.20
ORDER_MARGIN = 0.05
SDK_COMMIT = "1043931fc6018761f2a6faab70a1b24d00b543d3"
"""aws-neuron-sdk tag v2.26.1, the last release of the old API (`neuronxcc.nki`). Its mamba kernels
are the ones the tutorial profiled (SDK 2.20; only their launch style changed since). The NKI 0.6
rewrite of the file (from 2026-04) gives mamba_v1 the loop order of mamba_v2, so it is not the
kernel whose 172.93 us and 2.34 ms were measured."""
MAMBA_PATH = "nki/examples/fused_mamba/mamba_nki_kernels.py"
SLOW_ROWS = {"mamba-v2-s4096", "mamba-v3-s4096", "mamba-v2-s8192", "mamba-v3-s8192"}
"""Rows left out by --quick (besides the tutorial-size matmuls): traces of 50k+ instructions."""


ROW_FIELDS = ("id", "engine_class", "fitted", "target", "published_s", "predicted_s", "error", "instructions",
              "wall_s")


def load_table(path: pathlib.Path = TABLE) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@nki.jit
def dma_once(src):
    """One HBM -> SBUF transfer of the whole source (the DMA micro-measurement) and nothing else."""
    tile = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=src)
    return nl.ndarray((1, 1), dtype=src.dtype, buffer=nl.shared_hbm)


def _mamba_module():
    """The SDK's mamba kernels at SDK_COMMIT (old API), imported with `neuronxcc.nki` meaning
    trnsim.nki.legacy: from the old-API export (tools/export_legacy_kernels.py) or the mirror."""
    root = os.environ.get("TRNSIM_LEGACY_KERNELS")
    source = pathlib.Path(root, "aws-neuron-sdk", MAMBA_PATH) if root else None
    if source is not None and source.is_file():
        text = source.read_text()
    else:
        mirror = pathlib.Path("/work/.mirror/aws-neuron+aws-neuron-sdk/repo")
        shown = subprocess.run(["git", f"--git-dir={mirror}", "show", f"{SDK_COMMIT}:{MAMBA_PATH}"],
                               capture_output=True, text=True, check=False)
        if shown.returncode:
            return None
        text = shown.stdout
    folder = pathlib.Path(tempfile.mkdtemp())
    (folder / "sdk_mamba_kernels.py").write_text(text)
    spec = importlib.util.spec_from_file_location("sdk_mamba_kernels", folder / "sdk_mamba_kernels.py")
    module = importlib.util.module_from_spec(spec)
    with trnsim.nki.compat.enabled(legacy=True):
        spec.loader.exec_module(module)
    return module


def _sizes(shapes: str) -> dict[str, int]:
    return {key: int(value) for key, value in (item.split("=") for item in shapes.split())}


def trace_row(row: dict, mamba):
    """The row's kernel traced (no values) on its target, or None when its source is missing."""
    target, dtype, kernel = row["target"], row["dtype"], row["kernel"]
    if kernel.startswith("matmul_"):
        M, K, N = tutorial.SIZES["tutorial"]
        specs = (nki.TensorSpec((K, M), dtype), nki.TensorSpec((K, N), dtype))
        return nki.trace(getattr(tutorial, kernel), *specs, target=target)
    if kernel.startswith("mamba_"):
        if mamba is None:
            return None
        size = _sizes(row["shapes"])
        b, c, s, n = size["batch"], size["channels"], size["seq"], size["state"]
        shapes = ((b, c, s), (b, c, s), (c, n), (b, n, s), (b, n, s))
        specs = [nki.TensorSpec(shape, dtype) for shape in shapes]
        with trnsim.nki.compat.enabled(legacy=True):
            return nki.trace(getattr(mamba, kernel), *specs, target=target)
    if kernel == "dma_copy":
        return nki.trace(dma_once, nki.TensorSpec((8, 2048), dtype), target=target)
    raise ValueError(f"{row['id']}: no runner for kernel {kernel!r}")


def _predicted_s(recorded, row: dict) -> float:
    """The kernel's latency, or for a `measure` of "instruction" the busy time of its longest
    instruction (a micro-measurement of one transfer's queue time)."""
    timeline = schedule(recorded, row["target"])
    if row["measure"] == "instruction":
        return float(timeline.duration_s.max())
    return timeline.latency_s


def _mape(rows: list[dict]) -> float | None:
    return round(float(np.mean([abs(r["error"]) for r in rows])), 4) if rows else None


def _by_class(rows: list[dict]) -> dict[str, float | None]:
    classes = sorted({r["engine_class"] for r in rows})
    return {name: _mape([r for r in rows if r["engine_class"] == name]) for name in classes}


def orderings(rows: list[dict]) -> list[dict]:
    """Each documented ordering (pairs of versions of one group more than ORDER_MARGIN apart)."""
    found = []
    groups = sorted({r["version_group"] for r in rows})
    for group in groups:
        members = sorted((r for r in rows if r["version_group"] == group), key=lambda r: int(r["version"]))
        for first, later in zip(members, members[1:], strict=False):
            ratio = later["published_s"] / first["published_s"]
            if abs(ratio - 1) <= ORDER_MARGIN:
                continue
            faster = ratio < 1
            holds = (later["predicted_s"] < first["predicted_s"]) == faster
            found.append({"group": group, "versions": [first["id"], later["id"]],
                          "published": "faster" if faster else "slower", "holds": holds})
    return found


def run(rows: list[dict]) -> dict:
    mamba = _mamba_module() if any(r["kernel"].startswith("mamba_") for r in rows) else None
    done, skipped = [], []
    for row in rows:
        started = time.perf_counter()
        recorded = trace_row(row, mamba)
        if recorded is None:
            skipped.append(row["id"])
            continue
        predicted = _predicted_s(recorded, row)
        published = float(row["published_s"])
        done.append({**row, "published_s": published, "predicted_s": predicted,
                     "error": round(predicted / published - 1, 4), "instructions": len(recorded),
                     "wall_s": round(time.perf_counter() - started, 2)})
    held_out = [r for r in done if r["fitted"] != "yes"]
    fitted = [r for r in done if r["fitted"] == "yes"]
    ordered = orderings(done)
    per_class = _by_class(held_out)
    within = all(v <= GOAL for v in per_class.values())
    passed = bool(held_out) and within and all(o["holds"] for o in ordered)
    return {
        "id": "fidelity", "goal": f"held-out MAPE <= {GOAL:.0%} overall and per engine class; orderings hold",
        "held_out": {"mape": _mape(held_out), "per_class": per_class, "rows": len(held_out)},
        "fitted": {"mape": _mape(fitted), "per_class": _by_class(fitted), "rows": len(fitted)},
        "orderings": ordered, "passed": passed, "skipped": skipped,
        "rows": [{key: row[key] for key in ROW_FIELDS} for row in done],
        "note": "fitted rows (calibration, excluded from the held-out figures): "
                + ", ".join(r["id"] for r in fitted),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the rows with the largest traces")
    parser.add_argument("--rows", default="", help="comma-separated row ids (default: all)")
    args = parser.parse_args(argv)
    rows = load_table()
    if args.rows:
        wanted = set(args.rows.split(","))
        rows = [r for r in rows if r["id"] in wanted]
    if args.quick:
        rows = [r for r in rows if r["id"] not in SLOW_ROWS and not r["kernel"].startswith("matmul_")]
    report = run(rows)
    print(json.dumps(report, indent=1))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
