"""Throughput of trnsim.numerics casts and MX quantisation against ml_dtypes' astype (same run).

    python bench/numerics.py [--elements N] [--repeats R]

Prints one JSON object: every case's elements/s, its ml_dtypes baseline, the ratio and the goal
(RNE >= 1.0x, stochastic >= 0.5x; MX cases are reported without a goal). Exits 1 if a goal is missed.
The bf16 paths use both cores (ml_dtypes' astype uses one), so their ratios drop on a busy machine;
the load average is recorded with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import ml_dtypes
import numpy as np

from trnsim import numerics

GOALS = {"nearest": 1.0, "stochastic": 0.5}


def paired_best_seconds(ours, base, repeats: int) -> tuple[float, float]:
    """Best times of ours and the baseline, run alternately so both see the same machine load."""
    ours()  # warm-up: tables, thread pools, page faults
    base()
    ours_s, base_s = [], []
    for _ in range(repeats):
        for fn, times in ((ours, ours_s), (base, base_s)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return min(ours_s), min(base_s)


def cast_case(x, fmt: str, rounding: str, repeats: int) -> dict:
    dtype = numerics.get_format(fmt).numpy_dtype
    ours, base = paired_best_seconds(lambda: numerics.cast(x, fmt, rounding=rounding, seed=0),
                                     lambda: x.astype(dtype), repeats)
    return case(f"cast_{rounding}_{fmt}", x.size, ours, f"ml_dtypes astype {fmt}", base, GOALS[rounding])


def mx_case(x, fmt: str, repeats: int) -> dict:
    element = numerics.get_mx_format(fmt).element
    ours, base = paired_best_seconds(lambda: numerics.quantize_mx(x, fmt),
                                     lambda: x.astype(element.numpy_dtype), repeats)
    return case(f"quantize_{fmt}", x.size, ours, f"ml_dtypes astype {element.name} (no scales)", base, None)


def case(case_id: str, n: int, ours_s: float, base_name: str, base_s: float, goal: float | None) -> dict:
    ratio = base_s / ours_s
    return {"id": case_id, "measure": "elements/s", "value": n / ours_s,
            "baseline": {"name": base_name, "value": n / base_s}, "ratio": round(ratio, 3),
            "goal": None if goal is None else f">= {goal}x", "met": None if goal is None else ratio >= goal}


def machine() -> dict:
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__, "platform": platform.platform(),
            "load_average_1min": round(os.getloadavg()[0], 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 24)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    x = np.random.default_rng(0).standard_normal(args.elements).astype(np.float32)
    cases = [cast_case(x, fmt, rounding, args.repeats)
             for rounding in ("nearest", "stochastic")
             for fmt in ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2")]
    cases += [mx_case(x, fmt, args.repeats) for fmt in ("mxfp8_e4m3", "mxfp4_e2m1")]
    goal_cases = [c for c in cases if c["met"] is not None]
    worst = min(goal_cases, key=lambda c: c["ratio"] / GOALS[c["id"].split("_")[1]])
    report = {"id": "numerics_throughput", "measure": f"elements/s on {args.elements} float32 N(0,1) "
              f"inputs, best of {args.repeats}", "value": worst["value"], "baseline": worst["baseline"],
              "ratio": worst["ratio"], "goal": "RNE >= 1.0x and stochastic >= 0.5x ml_dtypes astype",
              "worst_case": worst["id"], "all_goals_met": all(c["met"] for c in goal_cases),
              "cases": cases, "machine": machine()}
    print(json.dumps(report, indent=2))
    return 0 if report["all_goals_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
