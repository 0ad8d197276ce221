"""The tutorial-size calibration check (about 30 s); `python bench/fidelity_matmul.py` runs it too."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fidelity_matmul.py"


@pytest.mark.slow
@pytest.mark.fidelity
def test_tutorial_kernels_within_25_percent_of_the_published_trn1_latencies(capsys):
    spec = importlib.util.spec_from_file_location("fidelity_matmul", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main()
    report = json.loads(capsys.readouterr().out)
    assert report["same_order"]
    assert all(abs(row["error"]) <= 0.25 for row in report["rows"]), report["rows"]
    assert code == 0
