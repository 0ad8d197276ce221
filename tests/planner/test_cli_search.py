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


def test_a_serving_request_longer_than_the_model_is_the_commands_error(capsys):
    """It was a row of the table on every instance, and exit code 1."""
    assert main(["plan", "serve", "--model", "llama-3.1-8b", "--seq-in", "200000"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("trnsim: error: seq_in + seq_out 200,128 is longer") and not captured.out


def test_plan_compare_prints_days_dollars_sources_and_break_even(roofline_costs, capsys):
    code = main(["plan", "compare", "--model", "llama-2-7b", "--train-tokens", "1e11", "--seq", "4096",
                 "--global-batch", "256", "--instance", "p5.48xlarge", "trn2.48xlarge", "Trn2 UltraServer",
                 "--monthly-spend", "10000", "--engineering-cost", "50000"])
    out = capsys.readouterr().out
    assert code == 0 and "[P1][P2]" in out and "unknown (--price)" in out
    assert "pays back" in out or "never pays back" in out


@pytest.mark.parametrize("argv", [
    ["plan", "train", "--model", "llama-3.1-8b", "--tp", "-1"],           # was tp-1, -219 sequences/s
    ["plan", "train", "--model", "llama-3.1-8b", "--global-batch", "-64"],
    ["plan", "train", "--model", "llama-3.1-8b", "--train-tokens", "nan"],  # was "nan days, $nan"
    ["plan", "train", "--model", "llama-3.1-8b", "--price", "inf"],
    ["plan", "train", "--model", "llama-3.1-8b", "--microbatch", "0"],     # was a ZeroDivisionError
    ["plan", "serve", "--model", "llama-3.1-8b", "--seq-out", "0"],
    ["plan", "serve", "--model", "llama-3.1-8b", "--tpot-ms", "0"],        # was silently ignored
    ["plan", "search", "--model", "llama-3.1-8b", "--top", "-2"],
    ["plan", "compare", "--model", "llama-3.1-8b", "--train-tokens", "1e12", "--chips", "0"],
])
def test_plan_refuses_nonsense_numbers_before_it_runs(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_planner_api_refuses_counts_below_one():
    from trnsim.errors import ConfigError
    from trnsim.planner import serving, training
    for plan in (training.TrainPlan(tp=0), training.TrainPlan(microbatch=-1),
                 training.TrainPlan(interleave=2)):
        with pytest.raises(ConfigError):
            training.train("llama-2-7b", "trn1.32xlarge", 1, plan)
    with pytest.raises(ConfigError, match="seq_out=0"):
        serving.serve("llama-2-7b", "trn1.32xlarge", serving.ServePlan(tp=32, seq_out=0))
    with pytest.raises(ConfigError, match="positive dollars"):
        training.machine("trn1.32xlarge").price(float("nan"))


def test_a_price_given_for_several_instances_fills_in_only_the_unpriced(roofline_costs, capsys):
    """--price 43.26 replaced every catalog price (trn2.48xlarge at 4 x $43.26/h)."""
    code = main(["plan", "compare", "--model", "llama-2-7b", "--train-tokens", "1e11", "--seq", "4096",
                 "--global-batch", "256", "--instance", "trn2.48xlarge", "Trn2 UltraServer", "--price", "400",
                 "--json"])
    jobs = {job["instance"]: job for job in json.loads(capsys.readouterr().out)}
    assert code == 0 and jobs["trn2.48xlarge"]["price_source"] != "given by the user"
    assert jobs["Trn2 UltraServer"]["price_source"] == "given by the user"


def test_break_even_names_the_instance_without_a_price():
    from types import SimpleNamespace

    from trnsim.cli import plan as plan_command
    jobs = [SimpleNamespace(instance=name, usd=usd, days=days)
            for name, usd, days in (("a", None, 1.0), ("b", 10.0, 1.0), ("c", None, 1.0), ("d", None, None))]
    args = SimpleNamespace(monthly_spend=100.0, engineering_cost=0.0)
    said = [plan_command._said(move, args) for move in plan_command._break_evens(jobs, args)]
    assert said == ["a -> b: no price for a, no break-even", "a -> c: no price for a and c, no break-even",
                    "a -> d: no plan fits on d, no break-even"]  # d used to be "no price for a and d"


def test_compare_where_nothing_fits_is_valid_json_and_exit_code_1(roofline_costs, capsys):
    """It wrote "days": Infinity (not JSON) and exited 0."""
    code = main(["plan", "compare", "--model", "llama-3.1-70b", "--train-tokens", "1e12", "--chips", "2",
                 "--instance", "trn1.32xlarge", "--json"])
    job = json.loads(capsys.readouterr().out)[0]
    assert code == 1 and job["days"] is None and job["usd"] is None and "does not fit" in job["note"]


def test_json_keeps_the_token_budget_and_the_break_even(roofline_costs, capsys):
    """--json left out the days and dollars of --train-tokens and the break-even of --monthly-spend."""
    assert main(["plan", "train", "--model", "llama-2-7b", "--instance", "trn1.32xlarge", "--tp", "8",
                 "--global-batch", "64", "--train-tokens", "1e9", "--json"]) == 0
    budget = json.loads(capsys.readouterr().out)["train_tokens"]
    assert budget["tokens"] == 1e9 and budget["days"] > 0 and budget["usd"] > 0
    assert main(["plan", "compare", "--model", "llama-2-7b", "--train-tokens", "1e11", "--seq", "4096",
                 "--global-batch", "256", "--instance", "trn1.32xlarge", "trn2.48xlarge",
                 "--monthly-spend", "10000", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [move["to"] for move in found["break_even"]] == ["trn2.48xlarge"] and len(found["jobs"]) == 2


def test_the_pareto_plot_of_an_unpriced_instance_is_refused(tmp_path, capsys):
    """Every plan was drawn at $0 per step while the table said the price was unknown."""
    from trnsim.cli import main
    picture = tmp_path / "pareto.png"
    assert main(["plan", "search", "--model", "llama-3.1-8b", "--instance", "Trn2 UltraServer",
                 "--plot", str(picture), "--top", "3"]) == 2
    assert "needs Trn2 UltraServer's price" in capsys.readouterr().err and not picture.exists()
