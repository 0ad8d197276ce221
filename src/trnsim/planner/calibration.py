"""The planner's fitted constants, each naming the rows of data/calibration.csv (a copy of
../shared/reference/planner-calibration.csv) it was fitted on, and the comparison of predictions
with published rows: the calibration file (fitted and held-out rows) and data/checks.csv (other
published rows, never used for fitting). `bench/planner.py --fit` repeats the fit.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).with_name("data")

TRAIN_TIME_FACTOR = {"NeuronCore-v2": 0.7356}
"""Whole-step op time / the sum of the cost library's per-op times (compiler scheduling, fusion,
host gaps), by NeuronCore generation."""
PREFILL_TIME_FACTOR = {"NeuronCore-v2": 0.6074, "NeuronCore-v3": 2.1751}
"""The same for a prefill pass (one prompt through every layer)."""
DECODE_TIME_FACTOR = {"NeuronCore-v2": 0.4021}
"""The same for a decode step's ops (compiled batch, one token each: weight- and KV-read bound);
fitted on trn1/inf2 rows and H1 (trn2, which takes this factor as its stand-in)."""
DECODE_COLLECTIVE_FACTOR = {"NeuronCore-v2": 1.2825}
"""A decode step's all-reduces (a few KiB each, latency-bound) / the collective model's time,
fitted beside DECODE_TIME_FACTOR: a 7B model's step is mostly the latency of its all-reduces and a
70B model's mostly its weight reads, so rows of both sizes separate the two factors. Prefill and
training scale their collectives by their ops' factor (their rows cannot separate the two)."""
STAND_INS = ("NeuronCore-v4", "NeuronCore-v3", "NeuronCore-v2")
"""A generation without fitted rows takes the factor of the nearest older one that has them
(there are no published trn2 training or trn3 rows to fit on)."""

FITTED_ON: dict[str, tuple[str, ...]] = {
    "TRAIN_TIME_FACTOR.NeuronCore-v2": ("T1",),
    "PREFILL_TIME_FACTOR.NeuronCore-v2": ("I5t", "X37"),
    "PREFILL_TIME_FACTOR.NeuronCore-v3": ("H2",),
    "DECODE_TIME_FACTOR.NeuronCore-v2": ("I5", "I8", "I16", "H1"),
    "DECODE_COLLECTIVE_FACTOR.NeuronCore-v2": ("I5", "I8", "I16", "H1"),
}
"""Rows of calibration.csv each constant was fitted on; every other row is held out."""

def factor(table: dict[str, float], machine) -> float:
    """A machine's factor from one of the tables above (1 for a GPU: its own constants apply)."""
    if machine.gpu:
        return 1.0
    core = machine.spec.chip.core.name
    for name in STAND_INS[STAND_INS.index(core):] if core in STAND_INS else (core,):
        if name in table:
            return table[name]
    return 1.0


MODEL_NAMES = {
    "Llama-3.1-8B": "llama-3.1-8b", "Llama-3-8B": "llama-3-8b", "Llama-3-70B": "llama-3-70b",
    "Llama-3.3-70B": "llama-3.3-70b", "Llama-2-7B": "llama-2-7b", "Llama-2-13B": "llama-2-13b",
    "BERT-Large-ph1": "bert-large", "BERT-Large-ph2": "bert-large", "ViT-Base": "vit-base",
    "Qwen3-30B-A3B": "qwen3-30b-a3b", "GPT3-23B": "gpt3-23b", "GPT3-46B": "gpt3-46b",
    "GPT3-175B": "gpt3-175b", "Mistral-7B": "mistral-7b", "Llama-2-70B": "llama-2-70b",
}
"""Published model names -> presets (an "-int8w" suffix means weight-only int8)."""
PRECISION_NAMES = {"bf16+fp32opt": "bf16+fp32opt", "bf16+sr": "bf16+sr", "bf16": "bf16"}


@dataclass(frozen=True)
class Row:
    """One published measurement and the configuration it was taken at."""

    id: str
    split: str
    kind: str
    model: str
    instance: str
    nodes: int
    precision: str
    tp: int
    pp: int
    dp: int
    microbatch: int
    global_batch: int
    seq_in: int
    seq_out: int
    metric: str
    value: float
    unit: str
    source: str


def rows(name: str = "calibration.csv") -> list[Row]:
    """The rows of a published-measurement table in data/ (comment lines start with #)."""
    with (DATA / name).open() as handle:
        lines = [line for line in handle if not line.startswith("#")]
    found = []
    for raw in csv.DictReader(lines):
        found.append(Row(raw["id"], raw["split"], raw["kind"], raw["model"], raw["instance"],
                         int(raw["nodes"]), raw["precision"], int(raw["tp"]), int(raw["pp"]), int(raw["dp"]),
                         int(raw["microbatch"]), int(raw["global_batch"]), int(raw["seq_in"] or 0),
                         int(raw["seq_out"] or 0), raw["metric"], float(raw["value"]), raw["unit"],
                         raw["source"]))
    return found


def fitted_rows() -> set[str]:
    return {row for rows_ in FITTED_ON.values() for row in rows_}


def predict(row: Row) -> float:
    """The planner's prediction of a row's metric, in the row's unit."""
    from trnsim.planner import serving, training  # late: those modules read this one's constants

    base, _, suffix = row.model.partition("-int8w")
    name = MODEL_NAMES[base]
    if row.kind == "train":
        plan = training.TrainPlan(tp=row.tp, pp=row.pp, dp=row.dp, microbatch=row.microbatch,
                               global_batch=row.global_batch, seq=row.seq_in,
                               precision=PRECISION_NAMES.get(row.precision, "bf16"),
                               zero="zero1" if row.tp * row.pp > 1 else "none")
        return training.train(name, row.instance, row.nodes, plan).sequences_per_s
    weights = "int8" if row.model.endswith("-int8w") else "fp8" if row.precision == "fp8" else "bf16"
    plan = serving.ServePlan(tp=row.tp, concurrency=row.microbatch, compiled_batch=row.global_batch,
                           seq_in=row.seq_in, seq_out=row.seq_out, weights=weights)
    result = serving.serve(name, row.instance, plan)
    if row.metric.startswith("ttft"):
        return result.ttft_s * 1e3
    if row.metric.startswith(("tpot", "itl")):
        return result.tpot_s * 1e3
    return result.tokens_per_s


def errors(table: list[Row]) -> list[dict]:
    """Per row: prediction, published value, relative error, and whether the row was fitted on."""
    fitted = fitted_rows()
    report = []
    for row in table:
        try:
            predicted = predict(row)
            error = predicted / row.value - 1
        except Exception as failure:  # noqa: BLE001 -- a row the planner cannot predict is reported, not fatal
            predicted, error = None, f"{type(failure).__name__}: {failure}"
        report.append({"id": row.id, "kind": row.kind, "metric": row.metric, "published": row.value,
                       "predicted": predicted, "error": error, "fitted": row.id in fitted})
    return report


def mape(report: list[dict], fitted: bool | None = None) -> float | None:
    """Mean absolute percentage error over rows with a prediction (only fitted or held-out ones)."""
    found = [abs(item["error"]) for item in report
             if isinstance(item["error"], float) and (fitted is None or item["fitted"] == fitted)]
    return 100 * sum(found) / len(found) if found else None
