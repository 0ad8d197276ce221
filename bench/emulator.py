"""Emulator speed: the blocked bf16 matmul example at 2048^3 against numpy's fp32 `a @ b`, and
kernel instructions executed per second on a small-tile kernel. Prints one JSON object.

The kernel runs as trnsim runs it by default (deferred execution: a block's independent matmul
chains side by side on worker threads) and, for comparison, eagerly (`config.override(eager=True)`:
each nc_matmul when issued). Both compute every matmul with the same one-thread BLAS call, so
they give the same bits.

    python bench/emulator.py [--size 2048] [--repeats 5]

`legacy_value` times the same blocked matmul written in the old API (examples/legacy_matmul.py,
trnsim.nki.legacy); `legacy_ratio` is its time over the NKI 0.6 kernel's (goal: at most 1.25).

Times are medians of interleaved runs in one process (the baseline is measured in the same run),
so machine load affects both sides alike; `ratio_range` gives the spread of the per-run ratios.
The report names numpy's BLAS and OPENBLAS_CORETYPE: they set the baseline's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

from legacy_matmul import legacy_matmul_blocked  # noqa: E402
from matmul import matmul_blocked  # noqa: E402

import trnsim  # noqa: E402
import trnsim.nki as nki  # noqa: E402
import trnsim.nki.isa as nisa  # noqa: E402
import trnsim.nki.language as nl  # noqa: E402
from trnsim.core import blas  # noqa: E402

GOAL_RATIO = 2.0


@nki.jit
def small_tiles(x, steps=2000):
    """Many tiny Vector-engine instructions: measures per-instruction overhead."""
    tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    for _ in range(steps):
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=1.0, op1=nl.add, operand1=1.0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def machine() -> dict:
    import torch
    return {"cpus": os.cpu_count(), "numpy": np.__version__, "torch": torch.__version__,
            "python": sys.version.split()[0], "blas": blas.describe(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((args.size, args.size)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((args.size, args.size)).astype(ml_dtypes.bfloat16)
    a32, b32 = lhsT.astype(np.float32).T.copy(), rhs.astype(np.float32)
    run = nki.simulate(matmul_blocked, target="trn2")

    def eager():
        with trnsim.config.override(eager=True):
            run(lhsT, rhs)
    legacy = nki.simulate(legacy_matmul_blocked, target="trn2")
    run(lhsT, rhs)
    eager()
    legacy(lhsT, rhs)
    a32 @ b32  # warm-up all four
    kernel_s, eager_s, numpy_s, legacy_s = [], [], [], []
    for _ in range(args.repeats):
        kernel_s.append(timed(lambda: run(lhsT, rhs)))
        numpy_s.append(timed(lambda: a32 @ b32))
        eager_s.append(timed(eager))
        legacy_s.append(timed(lambda: legacy(lhsT, rhs)))
    kernel, baseline = statistics.median(kernel_s), statistics.median(numpy_s)
    pairs = [k / b for k, b in zip(kernel_s, numpy_s, strict=True)]  # each run against its neighbour
    x = np.ones((128, 64), np.float32)
    small = nki.simulate(small_tiles, target="trn2")
    small(x)
    small_s = statistics.median(timed(lambda: small(x)) for _ in range(3))
    instructions = len(small_tiles.last_trace)
    report = {
        "id": "emulator", "measure": f"blocked bf16 matmul example {args.size}^3, wall time (s)",
        "value": round(kernel, 4),
        "baseline": {"name": f"numpy fp32 a @ b {args.size}^3 (s)", "value": round(baseline, 4)},
        "ratio": round(kernel / baseline, 3), "goal": f"ratio <= {GOAL_RATIO}",
        "ratio_range": [round(min(pairs), 3), round(max(pairs), 3)],
        "eager_ratio": round(statistics.median(eager_s) / baseline, 3),
        "instructions": len(matmul_blocked.last_trace),
        "legacy_value": round(statistics.median(legacy_s), 4),
        "legacy_ratio": round(statistics.median(legacy_s) / kernel, 3), "legacy_goal": "legacy_ratio <= 1.25",
        "small_tile_instructions_per_s": round(instructions / small_s),
        "small_tile_kernel": f"{instructions} tensor_scalar/dma instructions on [128, 64] fp32",
        "matmul_workers": blas.started_threads(),
        "machine": machine(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
