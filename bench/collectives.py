"""The collective time model (trnsim.system) against the measured 16-rank trn2 nccom-test table.
Prints one JSON object: MAPE of time on the rows the constants were fitted on and, separately, on
the held-out rows (never fitted), each overall, at sizes >= 1 MiB and below, and per operation; and
the fraction of rows whose listed algorithm the model picks (the calibration table lists only the
operation's short name there, so no row names an algorithm and none is compared).

    python bench/collectives.py [--csv PATH] [--fit] [--predict 4,8,32,64]

The split (`held_out`) is fixed and deterministic, by size: every row of 128 MiB or more is held out
(extrapolation: the fit sees nothing above 64 MiB), and so is every row whose size is 2^k bytes with
k = 15, 19 or 23 (32 KiB, 512 KiB, 8 MiB: interpolation inside the fitted range, one in each of the
mesh, mesh/RDH and RDH ranges). The other rows are the fitting rows.

`--fit` refits the model's free constants (hardware/data/collectives.toml) on the fitting rows only,
minimising their MAPE of time, and prints them; copy them into the data file by hand. Only the
16-rank table is used: other rank counts are predictions, which `--predict` lists for the table's
operations and sizes (to compare with measurements of those rank counts).
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

REPO = pathlib.Path(__file__).resolve().parents[1]
TABLE = "collectives-trn2-16ranks.csv"
CANDIDATES = (REPO.parent / "shared" / "reference" / TABLE, REPO / "shared" / "reference" / TABLE)
"""Where the table is looked for, from this script's own path: `shared/reference` beside the
repository, then inside it."""
DEFAULT_CSV = next((path for path in CANDIDATES if path.exists()), CANDIDATES[0])
EXTRAPOLATE_FROM = 128 * (1 << 20)
INTERPOLATION_EXPONENTS = (15, 19, 23)
FITTED = {"fixed_latency_s": (0, 15e-6), "step_latency_s": (0, 20e-6), "hop_latency_factor": (0.3, 3),
          "reduce_latency_s": (0, 5e-6), "rdh_step_latency_s": (0, 30e-6), "link_efficiency": (0.3, 1),
          "mesh_efficiency": (0.05, 1), "rdh_efficiency": (0.2, 1), "mesh_max_bytes": (1e6, 8e6)}
"""The fitted constants and the bounds the fit searches."""
MIB = 1 << 20


def read_table(path: pathlib.Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return [{"size": int(row["size"]), "op": operation(row["algorithm"]), "ranks": int(row["cores"]),
             "listed": row["algorithm"], "time_us": float(row["time_avg"])} for row in csv.DictReader(lines)]


def held_out(row: dict) -> str | None:
    """Why a row is held out of the fit ("extrapolation" or "interpolation"), or None for a fitting row."""
    if row["size"] >= EXTRAPOLATE_FROM:
        return "extrapolation"
    if row["size"] in {1 << k for k in INTERPOLATION_EXPONENTS}:
        return "interpolation"
    return None


def split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(fitting rows, held-out rows) by `held_out`."""
    return [row for row in rows if held_out(row) is None], [row for row in rows if held_out(row)]


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
    """Errors on the fitting rows and on the held-out rows (each kind of hold-out too), apart."""
    fitting, held = split(rows)
    found = errors(held, machine)
    return {"fitting": summary(fitting, machine), "held_out": summary(held, machine),
            "held_out_extrapolation_ge_128MiB": mape(e for row, e, _ in found
                                                     if held_out(row) == "extrapolation"),
            "held_out_interpolation_32KiB_512KiB_8MiB": mape(e for row, e, _ in found
                                                              if held_out(row) == "interpolation"),
            "all_rows": mape(e for _, e, _ in errors(rows, machine))}


def summary(rows: list[dict], machine: system.Machine) -> dict:
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
    physically sensible bounds, on the fitting rows only; seeded, so the fit is reproducible."""
    from scipy.optimize import differential_evolution

    rows, _ = split(rows)
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
    fitting, held = split(rows)
    result = {"table": str(args.csv),
              "split": {"fitting_rows": len(fitting), "held_out_rows": len(held),
                        "rule": f"held out: size >= {EXTRAPOLATE_FROM >> 20} MiB (extrapolation) or size = "
                                f"2^{', 2^'.join(map(str, INTERPOLATION_EXPONENTS))} (interpolation)"},
              "model": report(rows, system.Machine(fabric, fabric.default_lnc))}
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
