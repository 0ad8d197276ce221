import pytest

from trnsim import planner
from trnsim.errors import ConfigError, SpecError
from trnsim.planner import TrainPlan


def test_memory_breakdown_follows_the_recipe_and_sharding(roofline_costs):
    plan = TrainPlan(tp=8, dp=4, global_batch=64, seq=4096, zero="none", recompute="full")
    plain = planner.train("llama-2-7b", "trn1.32xlarge", 1, plan)
    sharded = planner.train("llama-2-7b", "trn1.32xlarge", 1, TrainPlan(**{**plan.__dict__, "zero": "zero1"}))
    assert plain.memory["optimizer"] == pytest.approx(3 * plain.memory["gradients"])  # 12 B vs 4 B
    assert sharded.memory["optimizer"] == pytest.approx(plain.memory["optimizer"] / 4)
    assert plain.memory["weights"] == pytest.approx(plain.memory["gradients"] / 2)


def test_a_plan_that_does_not_fit_says_so(roofline_costs):
    result = planner.train("llama-3.1-70b", "trn1.32xlarge", 1,
                           TrainPlan(tp=1, dp=32, global_batch=32, seq=4096, zero="none"))
    assert not result.fits and sum(result.memory.values()) > 10 * result.capacity


def test_step_parts_add_up_and_pipelines_have_bubbles(roofline_costs):
    flat = planner.train("llama-2-7b", "trn1.32xlarge", 2, TrainPlan(tp=8, dp=8, global_batch=64, seq=4096))
    piped = planner.train("llama-2-7b", "trn1.32xlarge", 2,
                          TrainPlan(tp=8, pp=4, dp=2, global_batch=64, seq=4096))
    assert flat.step_s == pytest.approx(sum(flat.step.values()))
    assert flat.step["pipeline bubble"] == 0 and piped.step["pipeline bubble"] > 0
    assert piped.step["pipeline sends"] > 0
    assert 0 < flat.mfu < 1 and flat.tokens_per_s == pytest.approx(flat.sequences_per_s * 4096)


def test_more_nodes_of_data_parallel_train_faster(roofline_costs):
    one = planner.train("llama-2-7b", "trn2.48xlarge", 1, TrainPlan(tp=8, dp=8, global_batch=256, seq=4096))
    four = planner.train("llama-2-7b", "trn2.48xlarge", 4, TrainPlan(tp=8, dp=32, global_batch=256, seq=4096))
    assert 2.5 < four.sequences_per_s / one.sequences_per_s <= 4.0


@pytest.mark.parametrize("plan, message", [
    (TrainPlan(tp=8, dp=2), "ranks"),
    (TrainPlan(tp=5, dp=32 * 8 // 5), "heads"),
    (TrainPlan(tp=4, dp=1, pp=64, global_batch=64), "layers"),
    (TrainPlan(tp=32, pp=1, dp=8, global_batch=100), "global batch"),
    (TrainPlan(tp=32, dp=8, precision="fp16"), "precision"),
])
def test_bad_plans_say_what_would_divide(plan, message, roofline_costs):
    with pytest.raises(ConfigError, match=message):
        planner.train("llama-2-7b", "trn1.32xlarge", 8, plan)


def test_tp_must_divide_heads(roofline_costs):
    with pytest.raises(ConfigError, match="heads"):
        planner.train("llama-2-7b", "trn1.32xlarge", 3, TrainPlan(tp=3, dp=32, global_batch=32))


def test_unknown_instance_lists_the_known_ones():
    with pytest.raises(SpecError):
        planner.train("llama-2-7b", "trn9.huge", 1)


def test_gpu_instances_plan_with_their_own_roofline():
    result = planner.train("llama-2-7b", "p5.48xlarge", 4, TrainPlan(tp=8, dp=4, global_batch=64, seq=4096))
    assert result.fits and 0.1 < result.mfu < 0.6
    assert result.usd_per_hour == pytest.approx(4 * 55.04)


def test_selective_recomputation_costs_time_for_gated_and_plain_ffns():
    """The gated (SwiGLU) activation has two inputs and was skipped: selective was free for Llama."""
    from trnsim import planner
    from trnsim.planner import TrainPlan
    for name in ("llama-3.1-8b", "gpt3-23b"):
        plans = {rc: TrainPlan(tp=8, dp=16, recompute=rc, zero="fsdp") for rc in ("none", "selective")}
        steps = {rc: planner.train(name, "trn2.48xlarge", 2, plan) for rc, plan in plans.items()}
        assert steps["selective"].step_s > steps["none"].step_s
        assert steps["selective"].memory["activations"] < steps["none"].memory["activations"]


def test_the_first_1f1b_stage_holds_pp_microbatches_and_interleaving_adds_to_that():
    """Without interleaving the code held 2*pp - 1 (Korthikanti et al.'s interleaved factor at v=1)."""
    from trnsim.planner import memory
    from trnsim.planner.models import model
    llama = model("llama-3.1-8b")

    def per_layer(pp, v=1):
        total = memory.breakdown(llama, tp=1, pp=pp, dp=1, ep=1, microbatch=1, seq=4096,
                                 precision="bf16+fp32opt", zero=1, recompute=1, interleave=v,
                                 capacity=1e12)["activations"]
        return float(total) / (llama.layers / pp)
    one = per_layer(1)
    for pp in (2, 4, 8):
        assert per_layer(pp) == pytest.approx(pp * one)
        assert per_layer(pp, 2) == pytest.approx(pp * one * (1 + (pp - 1) / (pp * 2)))


@pytest.mark.parametrize("arguments, says", [
    ({"precision": "xx"}, "unknown precision"), ({"nodes": 1.5}, "nodes=1.5"),
    ({"global_batch": 0}, "global_batch=0"), ({"top": -1}, "top=-1"), ({"seq": -5}, "seq=-5"),
])
def test_search_refuses_arguments_it_cannot_plan(arguments, says):
    """Raw KeyError/TypeError, or plans with 0 tokens/s for a batch of 0."""
    from trnsim.errors import ConfigError
    from trnsim.planner.search import search
    arguments = {"nodes": 1, **arguments}
    nodes = arguments.pop("nodes")
    with pytest.raises(ConfigError, match=says):
        search("llama-3.1-8b", "trn2.48xlarge", nodes, **arguments)


def test_costs_and_token_counts_must_be_finite():
    from trnsim.errors import ConfigError
    from trnsim.planner import economics
    for tokens in (float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="positive finite"):
            economics.training_job("llama-3.1-8b", "trn2.48xlarge", 1, tokens)
    with pytest.raises(ConfigError, match="finite dollars"):
        economics.savings(100, -5)


def test_an_instance_without_a_recorded_chip_network_is_refused_by_name():
    """docs said trn2.3xlarge takes --price; planning it failed deep in the collective model."""
    from trnsim import planner
    from trnsim.errors import SpecError
    from trnsim.planner.machines import known_instances
    with pytest.raises(SpecError, match="trn2.3xlarge: no chip network is recorded"):
        planner.train("llama-3.1-8b", "trn2.3xlarge", 1, planner.TrainPlan(tp=1, dp=4), price=2.0)
    assert "trn2.3xlarge" not in known_instances() and "trn2.48xlarge" in known_instances()
