"""The published-timings table (calibration and validation kept apart) and bench/fidelity.py."""

import importlib.util
from pathlib import Path

import pytest

from trnsim import hardware

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fidelity.py"


@pytest.fixture(scope="module")
def fidelity():
    spec = importlib.util.spec_from_file_location("bench_fidelity", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_row_has_its_source_shapes_and_a_fitted_flag(fidelity):
    rows = fidelity.load_table()
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert all(row[key] for key in ("source", "instance", "target", "dtype", "shapes")), row["id"]
        assert row["fitted"] in {"yes", "no"} and row["measure"] in {"latency", "instruction"}
        assert row["engine_class"] in {"vector", "dma", "tensor"} and float(row["published_s"]) > 0
    held_out = {row["engine_class"] for row in rows if row["fitted"] == "no"}
    assert held_out == {"vector", "dma", "tensor"}


def test_the_fitted_rows_are_the_data_the_fitted_constant_names(fidelity):
    fitted = [row for row in fidelity.load_table() if row["fitted"] == "yes"]
    assert {row["version_group"] for row in fitted} == {"matmul-tutorial-trn1"}
    source = hardware.core("trn1").costs.sources["dma_small_transfer_efficiency"].source
    assert "tutorial" in source and "51.80" in source


def _row(group, version, published, predicted):
    return {"id": f"{group}-{version}", "version_group": group, "version": str(version),
            "published_s": published, "predicted_s": predicted}


def test_orderings_check_documented_speedups_and_skip_ties(fidelity):
    rows = [_row("a", 1, 10.0, 8.0), _row("a", 2, 5.0, 9.0),   # published faster, predicted slower
            _row("a", 3, 5.1, 1.0),                             # within 5% of version 2: a tie
            _row("b", 1, 2.0, 2.0), _row("b", 2, 1.0, 1.5)]
    found = fidelity.orderings(rows)
    assert [(o["versions"], o["holds"]) for o in found] == [(["a-1", "a-2"], False), (["b-1", "b-2"], True)]


def test_held_out_dma_micro_measurement_within_5_percent(fidelity):
    report = fidelity.run([row for row in fidelity.load_table() if row["id"] == "dma-32k-trn2"])
    [row] = report["rows"]
    assert abs(row["error"]) <= 0.05 and report["fitted"]["rows"] == 0


@pytest.mark.slow
def test_held_out_published_kernels_within_20_percent_per_engine_class(fidelity):
    if fidelity._mamba_module() is None:
        pytest.skip("the SDK's mamba kernels need the aws-neuron-sdk mirror or TRNSIM_LEGACY_KERNELS")
    rows = [row for row in fidelity.load_table() if row["fitted"] == "no"]
    report = fidelity.run([row for row in rows if row["id"] not in fidelity.SLOW_ROWS
                           and not row["kernel"].startswith("matmul_")])
    assert report["skipped"] == []
    assert all(mape <= 0.20 for mape in report["held_out"]["per_class"].values()), report["held_out"]
    assert all(order["holds"] for order in report["orderings"]), report["orderings"]
