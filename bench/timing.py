"""Timing-model speed: instructions scheduled per second on a ~100k-instruction trace, and the
wall time of timing-only mode (trace without values + schedule) for the blocked matmul at the
tutorial size. Prints one JSON object.

    python bench/timing.py [--repeats 5]

The trace is the matmul tutorial's tiled kernel at [4096,8192] @ [8192,8192] (99,328
instructions: DMAs, matmuls, copies), recorded once in trace-only mode. The baseline, measured in
the same run and interleaved with the scheduler runs, is one bare pass over the same trace that
reads every operand's allocation and partitions: the floor any per-instruction Python loop pays.
Rates use the process's CPU time (medians of the repeats), since other jobs on a shared machine
inflate wall time; the wall-clock rate is reported beside it. `compiled` lists the scheduler
modules that ran compiled (setup.py builds them with Cython; TRNSIM_PYTHON_ONLY=1 runs them as
Python, for comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

import matmul_tutorial as tutorial  # noqa: E402

from trnsim import _native  # noqa: E402
from trnsim.timing.schedule import schedule  # noqa: E402

GOAL_PER_S = 200_000


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def bare_pass(trace) -> int:
    total = 0
    for ins in trace:
        for region in ins.inputs + ins.outputs:
            total += region.buffer + region.partition_start + region.partition_count
    return total


def machine() -> dict:
    import torch
    return {"cpus": os.cpu_count(), "numpy": np.__version__, "torch": torch.__version__,
            "python": sys.version.split()[0], "load_average_1min": round(os.getloadavg()[0], 2)}


def timing_only_blocked() -> dict:
    """Trace-only run of the blocked M/N/K kernel at tutorial size, then its trn1 schedule."""
    start = time.perf_counter()
    trace = tutorial.traces("tutorial", kernels=[tutorial.matmul_blocked_mnk])["matmul_blocked_mnk"]
    traced = time.perf_counter()
    timeline = schedule(trace, "trn1")
    done = time.perf_counter()
    return {"measure": "timing-only mode, matmul_blocked_mnk [4096,8192]@[8192,8192] bf16 on trn1: "
                       "trace without values + schedule, wall time (s)",
            "value": round(done - start, 3), "trace_s": round(traced - start, 3),
            "schedule_s": round(done - traced, 3), "instructions": len(trace),
            "predicted_latency_ms": round(timeline.latency_s * 1e3, 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    trace = tutorial.traces("tutorial", kernels=[tutorial.matmul_tiled])["matmul_tiled"]
    schedule(trace, "trn1")  # warm-up: imports, cost tables
    scheduler, bare = [], []
    for _ in range(args.repeats):
        scheduler.append(timed(lambda: schedule(trace, "trn1")))
        bare.append(timed(lambda: bare_pass(trace)))
    # CPU time of this single-threaded process: other jobs on a shared machine inflate wall time
    rate = len(trace) / statistics.median(cpu for _, cpu in scheduler)
    baseline = len(trace) / statistics.median(cpu for _, cpu in bare)
    report = {
        "id": "timing", "measure": f"instructions scheduled per CPU second ({len(trace)}-instruction "
                                   "tiled-matmul trace, trn1)",
        "value": round(rate),
        "baseline": {"name": "bare Python pass reading every operand (instructions per CPU second)",
                     "value": round(baseline)},
        "ratio": round(rate / baseline, 4), "goal": f"value >= {GOAL_PER_S}",
        "wall_per_s": round(len(trace) / statistics.median(wall for wall, _ in scheduler)),
        "compiled": _native.compiled(),
        "timing_only": timing_only_blocked(),
        "machine": machine(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
