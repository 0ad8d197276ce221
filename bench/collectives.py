"""The collective time model (trnsim.system) against the measured 16-rank trn2 nccom-test table.
Prints one JSON object: MAPE of time overall, at sizes >= 1 MiB and below, per operation, and the
fraction of rows whose listed algorithm the model picks (the calibration table lists only the
operation's short name there, so no row names an algorithm and none is compared).

    python bench/collectives.py [--csv PATH] [--fit] [--predict 4,8,32,64]

`--fit` refits the model's free constants (hardware/data/collectives.toml) on the table, minimising
the MAPE of time, and prints them; copy them into the data file by hand. Only the 16-rank table is
fitted: other rank counts are predictions, which `--predict` lists for the table's operations and
sizes (to compare with measurements of those rank counts).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import pathlib
import sys

from trnsim import system
from trnsim.system.collectives import ALGORITHMS, operation, time_on

REFERENCE = pathlib.Path(__file__).resolve().parents[2] / "shared" / "reference"
DEFAULT_CSV = REFERENCE / "collectives-trn2-16ranks.csv"
FITTED = {"fixed_latency_s": (0, 15e-6), "step_latency_s": (0, 20e-6), "hop_latency_factor": (0.3, 3),
          "reduce_latency_s": (0, 5e-6), "rdh_step_latency_s": (0, 30e-6), "link_efficiency": (0.3, 1),
          "mesh_efficiency": (0.05, 1), "rdh_efficiency": (0.2, 1), "mesh_max_bytes": (1e6, 8e6)}
"""The fitted constants and the bounds the fit searches."""
MIB = 1 << 20


def read_table(path: pathlib.Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return [{"size": int(row["size"]), "op": operation(row["algorithm"]), "ranks": int(row["cores"]),
             "listed": row["algorithm"], "time_us": float(row["time_avg"])} for row in csv.DictReader(lines)]


def machine_with(constants: dict[str, float]) -> system.Machine:
    """The trn2.48xlarge machine with the model's constants replaced (for fitting)."""
    fabric = system.fabric("trn2.48xlarge")
    if "mesh_max_bytes" in constants:
        constants = {**constants, "mesh_max_bytes": int(constants["mesh_max_bytes"])}
    model = dataclasses.replace(fabric.model, **constants)
    return system.Machine(dataclasses.replace(fabric, model=model), fabric.default_lnc)


def errors(rows: list[dict], machine: system.Machine) -> list[tuple[dict, float, str]]:
    out = []
    for row in rows:
        predicted = time_on(machine, row["op"], row["size"], row["ranks"])
        out.append((row, abs(predicted.seconds * 1e6 - row["time_us"]) / row["time_us"], predicted.algorithm))
    return out


def mape(items) -> float | None:
    items = list(items)
    return round(100 * sum(items) / len(items), 2) if items else None


def report(rows: list[dict], machine: system.Machine) -> dict:
    found = errors(rows, machine)
    compared = [(row, algorithm) for row, _, algorithm in found if row["listed"] in ALGORITHMS]
    return {
        "rows": len(found),
        "mape_pct": mape(e for _, e, _ in found),
        "mape_pct_ge_1MiB": mape(e for row, e, _ in found if row["size"] >= MIB),
        "mape_pct_lt_1MiB": mape(e for row, e, _ in found if row["size"] < MIB),
        "mape_pct_by_op": {op: mape(e for row, e, _ in found if row["op"] == op)
                           for op in dict.fromkeys(row["op"] for row in rows)},
        "algorithm_rows_compared": len(compared),
        "algorithm_match": (sum(row["listed"] == a for row, a in compared) / len(compared)
                            if compared else None),
        "algorithms_predicted": sorted({a for _, _, a in found}),
    }


def predictions(rows: list[dict], rank_counts: list[int]) -> list[dict]:
    """Predicted time (us), busbw and algorithm at each rank count for the table's (op, size) rows."""
    found = []
    for ranks in rank_counts:
        for row in rows:
            t = system.collective_time(row["op"], row["size"], ranks)
            found.append({"ranks": ranks, "op": row["op"], "size": row["size"],
                          "time_us": round(t.seconds * 1e6, 2), "busbw": round(t.busbw, 2),
                          "algorithm": t.algorithm})
    return found


def fit(rows: list[dict]) -> dict[str, float]:
    """Differential evolution (global: the choice of algorithm makes the error piecewise) within
    physically sensible bounds; seeded, so the fit is reproducible."""
    from scipy.optimize import differential_evolution

    def loss(values):
        machine = machine_with(dict(zip(FITTED, values, strict=True)))
        return sum(e for _, e, _ in errors(rows, machine)) / len(rows)

    best = differential_evolution(loss, list(FITTED.values()), maxiter=60, popsize=12, seed=1, tol=1e-6)
    return {name: round(float(value), 12) for name, value in zip(FITTED, best.x, strict=True)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=pathlib.Path, default=DEFAULT_CSV)
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--predict", metavar="RANKS", help="comma-separated rank counts to predict")
    args = parser.parse_args()
    if not args.csv.exists():
        print(f"calibration table {args.csv} not found", file=sys.stderr)
        return 1
    rows = read_table(args.csv)
    fabric = system.fabric("trn2.48xlarge")
    result = {"table": str(args.csv), "model": report(rows, system.Machine(fabric, fabric.default_lnc))}
    if args.predict:
        result["predictions"] = predictions(rows, [int(r) for r in args.predict.split(",")])
    if args.fit:
        constants = fit(rows)
        result["fitted_constants"] = constants
        result["fitted"] = report(rows, machine_with(constants))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
