"""Fidelity: the matmul tutorial's four kernels on trn1 against the published latencies.

    python bench/fidelity_matmul.py

Prints each row's prediction beside the published value and its source, the MAPE and the worst
row, as one JSON object; exits non-zero if any row is off by more than 25% or the order of the
four kernels differs from the published order. The kernels (examples/matmul_tutorial.py) run in
trace-only mode at [4096,8192] @ [8192,8192] bf16; the model's only fitted constant,
`dma_small_transfer_efficiency`, was calibrated on this table (see docs/timing.md).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

import matmul_tutorial as tutorial  # noqa: E402

from trnsim.timing.profile import summarize  # noqa: E402
from trnsim.timing.schedule import schedule  # noqa: E402

SOURCE = ("reference nki.md §5 (SDK-2.26 general/nki/tutorials/matrix_multiplication.rst, "
          "trn1.32xlarge, nki.benchmark)")
TOLERANCE = 0.25


def main() -> int:
    rows = []
    for name, trace in tutorial.traces("tutorial", target="trn1").items():
        summary = summarize(schedule(trace, "trn1"))
        published = tutorial.PUBLISHED_MS[name]
        predicted = summary.latency_s * 1e3
        rows.append({"kernel": name, "predicted_ms": round(predicted, 3), "published_ms": published,
                     "error": round(predicted / published - 1, 4), "hfu": round(summary.hfu, 4),
                     "instructions": summary.instructions, "source": SOURCE})
    errors = [abs(r["error"]) for r in rows]
    worst = rows[int(np.argmax(errors))]
    same_order = ([r["kernel"] for r in sorted(rows, key=lambda r: -r["predicted_ms"])]
                  == [r["kernel"] for r in sorted(rows, key=lambda r: -r["published_ms"])])
    passed = max(errors) <= TOLERANCE and same_order
    report = {"id": "fidelity_matmul", "measure": "MAPE of predicted trn1 latency, 4 tutorial kernels",
              "value": round(float(np.mean(errors)), 4), "worst": worst["kernel"],
              "worst_error": worst["error"], "same_order": same_order,
              "goal": f"every row within +-{TOLERANCE:.0%}, same order", "passed": passed,
              "rows": rows, "machine": {"cpus": os.cpu_count(), "numpy": np.__version__}}
    print(json.dumps(report))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
