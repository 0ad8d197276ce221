import pytest

from trnsim import planner
from trnsim.errors import ConfigError
from trnsim.planner import ServePlan


def test_kv_cache_grows_with_context_and_batch(roofline_costs):
    short = planner.serve("llama-3.1-70b", "trn2.48xlarge", ServePlan(tp=64, compiled_batch=4, seq_in=1000))
    long = planner.serve("llama-3.1-70b", "trn2.48xlarge", ServePlan(tp=64, compiled_batch=8, seq_in=4000))
    ratio = long.memory["kv cache"] / short.memory["kv cache"]
    assert ratio == pytest.approx(2 * (4000 + 128) / (1000 + 128))


def test_int8_weights_halve_weight_memory_but_run_at_bf16_speed(roofline_costs):
    plan = ServePlan(tp=32, compiled_batch=1, seq_in=128, seq_out=128)
    bf16 = planner.serve("llama-3-8b", "trn1.32xlarge", plan)
    int8 = planner.serve("llama-3-8b", "trn1.32xlarge", ServePlan(**{**plan.__dict__, "weights": "int8"}))
    assert int8.memory["weights"] == pytest.approx(bf16.memory["weights"] / 2)
    assert int8.tpot_s == bf16.tpot_s and int8.ttft_s == bf16.ttft_s


def test_70b_does_not_fit_one_trn2_chip(roofline_costs):
    result = planner.serve("llama-3.3-70b", "trn2.48xlarge", ServePlan(tp=4))
    assert not result.fits


def test_throughput_and_price_per_token(roofline_costs):
    result = planner.serve("llama-3.1-8b", "trn2.48xlarge", ServePlan(tp=4, concurrency=8, compiled_batch=8))
    assert result.replicas == 16
    assert result.tokens_per_s <= 8 / result.tpot_s
    assert result.usd_per_million_tokens() == pytest.approx(
        35.76 / 3600 / result.tokens_per_s_per_instance * 1e6)


def test_unknown_prices_are_not_invented(roofline_costs):
    result = planner.serve("llama-3.1-8b", "Trn2 UltraServer", ServePlan(tp=64))
    assert result.usd_per_hour is None and result.usd_per_million_tokens() is None
    assert "--price" in result.price_source
    priced = planner.serve("llama-3.1-8b", "Trn2 UltraServer", ServePlan(tp=64), price=150.0)
    assert priced.usd_per_hour == 150.0


def test_the_h200_instances_have_their_memory_and_only_the_price_found(roofline_costs):
    """p5en has a public on-demand price; p5e has only a Capacity Block rate, so it has none."""
    priced = planner.serve("llama-3.1-70b", "p5en.48xlarge", ServePlan(tp=8))
    assert priced.usd_per_hour == 63.296 and "[P1]" in priced.price_source
    unpriced = planner.serve("llama-3.1-70b", "p5e.48xlarge", ServePlan(tp=8))
    assert unpriced.usd_per_hour is None and "--price" in unpriced.price_source
    h100 = planner.serve("llama-3.1-70b", "p5.48xlarge", ServePlan(tp=8))
    assert unpriced.tpot_s < h100.tpot_s  # decode reads the weights: 4.8 against 3.35 TB/s per GPU


@pytest.mark.parametrize("plan, message", [
    (ServePlan(tp=7), "divide"), (ServePlan(tp=4, concurrency=8, compiled_batch=4), "concurrency"),
])
def test_bad_serving_plans(plan, message):
    with pytest.raises(ConfigError, match=message):
        planner.serve("llama-3.1-8b", "trn1.32xlarge", plan)


def test_fp8_weights_need_an_fp8_peak():
    with pytest.raises(ConfigError, match="fp8"):
        planner.serve("llama-3.1-8b", "p4d.24xlarge", ServePlan(tp=8, weights="fp8"))


def test_a_rank_holds_whole_kv_heads_when_tp_does_not_divide_them():
    """At tp 6, each of Llama-3.1-8B's 8 KV heads lives on some rank, two on some: memory counted one."""
    from trnsim import planner
    plan = dict(compiled_batch=8, seq_in=2048, seq_out=2048)
    served = {tp: planner.serve("llama-3.1-8b", "inf2.48xlarge", planner.ServePlan(tp=tp, **plan))
              for tp in (4, 6, 8)}
    kv = {tp: result.memory["kv cache"] for tp, result in served.items()}
    assert kv[6] == kv[4] and kv[8] == kv[4] / 2  # 2, 2 and 1 heads per rank


def test_sequences_longer_than_the_models_positions_are_refused_at_once():
    """A 1,000,000-token prompt for Llama-2-7B (4,096 positions) ran for minutes; BERT-Large and
    ViT-Base were planned at 8,192 tokens."""
    import time

    started = time.perf_counter()
    with pytest.raises(ConfigError, match="longer than llama-2-7b's 4,096 positions"):
        planner.serve("llama-2-7b", "trn2.48xlarge", planner.ServePlan(tp=64, seq_in=1_000_000, seq_out=1))
    for name in ("bert-large", "vit-base"):
        with pytest.raises(ConfigError, match="positions"):
            planner.train(name, "trn1.32xlarge", 1, planner.TrainPlan(tp=1, dp=32, seq=8192))
    assert time.perf_counter() - started < 5


def test_a_rank_holds_whole_attention_heads_when_tp_exceeds_them(roofline_costs):
    """Llama-3.1-8B has 32 query and 8 KV heads: from tp 32 on each rank holds one query head (and
    from tp 8 one KV head), so its attention weights stop shrinking; only the FFN and embeddings
    split further. Weights per rank used to halve from tp 32 to 64."""
    mdl = planner.model("llama-3.1-8b")
    at = {tp: planner.serve(mdl.name, "trn2.48xlarge", ServePlan(tp=tp)).memory["weights"] for tp in (32, 64)}
    attention = mdl.layers * mdl.attention_params(64) * 2  # bf16
    assert mdl.attention_params(64) == mdl.attention_params(32)
    assert at[64] - attention == pytest.approx((at[32] - attention) / 2)
    assert at[64] > at[32] / 2


def test_an_encoder_is_not_served(roofline_costs):
    """bert-large got a decode TPOT and a price per million tokens."""
    with pytest.raises(ConfigError, match="bert-large is an encoder"):
        planner.serve("bert-large", "trn2.48xlarge", ServePlan(tp=4))
