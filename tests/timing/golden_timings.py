"""Golden timings of the tutorial kernels at the small size: write them only on request.

    python tests/timing/golden_timings.py --update-golden

A change to the timing model that moves these numbers must say why in its commit message; the
test (test_kernels.py) compares every kernel and target with the tolerance stored in the file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from trnsim.timing.profile import summarize
from trnsim.timing.schedule import schedule

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "matmul_tutorial_small.json"
EXAMPLE = HERE.parents[1] / "examples" / "matmul_tutorial.py"
TARGETS = ("trn1", "trn2", "trn3")
RELATIVE_TOLERANCE = 1e-6


def tutorial_module():
    spec = importlib.util.spec_from_file_location("matmul_tutorial", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(traces) -> dict:
    """kernel -> target -> {latency_s, busy_s per engine}."""
    table = {}
    for name, trace in traces.items():
        for target in TARGETS:
            summary = summarize(schedule(trace, target))
            table.setdefault(name, {})[target] = {
                "latency_s": summary.latency_s,
                "busy_s": {engine: use.busy_s for engine, use in summary.engines.items()}}
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update-golden", action="store_true", help="rewrite the golden file")
    args = parser.parse_args(argv)
    if not args.update_golden:
        parser.error("nothing to do without --update-golden")
    document = {"relative_tolerance": RELATIVE_TOLERANCE, "size": "small",
                "kernels": measure(tutorial_module().traces("small"))}
    GOLDEN.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
