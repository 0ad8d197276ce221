import json

import pytest

from trnsim.cli import main
from trnsim.planner import economics
from trnsim.planner.plots import pareto_front
from trnsim.planner.search import search


def test_search_ranks_only_plans_that_fit(roofline_costs):
    found = search("llama-2-7b", "trn1.32xlarge", 2, global_batch=64, seq=4096)
    assert found.enumerated > 100 and 0 < len(found.plans) < found.enumerated
    assert all(result.fits for result in found.plans)
    times = [result.step_s for result in found.plans]
    assert times == sorted(times)


def test_search_memory_mask_matches_the_plan_breakdown(roofline_costs):
    found = search("llama-2-13b", "trn1.32xlarge", 1, global_batch=32, seq=4096)
    fitting = {result.plan for result in found.plans}
    assert found.infeasible > 0 and fitting


def test_search_says_what_would_fit_when_nothing_does(roofline_costs):
    found = search("llama-3.1-405b", "trn1.32xlarge", 1, global_batch=32, seq=4096)
    assert not found.plans and "instances" in found.notes[0]


def test_search_evaluates_over_a_thousand_plans_per_second(roofline_costs):
    search("llama-2-7b", "trn2.48xlarge", 4, global_batch=256, seq=4096)
    again = search("llama-2-7b", "trn2.48xlarge", 4, global_batch=256, seq=4096)
    assert again.plans_per_s >= 1000


def test_break_even_and_pareto():
    assert economics.break_even_months(10_000, 0.4, 60_000) == pytest.approx(15.0)
    assert economics.break_even_months(10_000, 0.0, 1) == float("inf")
    assert pareto_front([(1.0, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 1.0)]) == [0, 1, 3]


def test_plan_train_json_and_plot(roofline_costs, capsys, tmp_path):
    picture = tmp_path / "plan.png"
    code = main(["plan", "train", "--model", "llama-2-7b", "--instance", "trn1.32xlarge", "--nodes", "2",
                 "--tp", "8", "--global-batch", "64", "--json", "--plot", str(picture)])
    assert code == 0 and picture.stat().st_size > 1000
    found = json.loads(capsys.readouterr().out)
    assert found["fits"] and found["plan"]["dp"] == 8 and found["usd_per_hour"] == pytest.approx(43.0)


def test_plan_serve_table(roofline_costs, capsys):
    code = main(["plan", "serve", "--model", "llama-3.3-70b", "--tpot-ms", "80", "--batch", "8"])
    out = capsys.readouterr().out
    assert code == 0 and all(name in out for name in ("inf2.48xlarge", "trn1.32xlarge", "trn2.48xlarge"))


def test_plan_errors_are_one_line(capsys):
    assert main(["plan", "train", "--model", "llama-2-7b", "--instance", "trn1.32xlarge", "--tp", "5"]) == 2
    assert "heads" in capsys.readouterr().err


def test_plan_compare_prints_days_dollars_sources_and_break_even(roofline_costs, capsys):
    code = main(["plan", "compare", "--model", "llama-2-7b", "--train-tokens", "1e11", "--seq", "4096",
                 "--global-batch", "256", "--instance", "p5.48xlarge", "trn2.48xlarge", "Trn2 UltraServer",
                 "--monthly-spend", "10000", "--engineering-cost", "50000"])
    out = capsys.readouterr().out
    assert code == 0 and "[P1][P2]" in out and "unknown (--price)" in out
    assert "pays back" in out or "never pays back" in out
