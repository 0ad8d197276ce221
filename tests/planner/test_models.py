import json

import pytest

from trnsim import planner
from trnsim.errors import ConfigError, SpecError


@pytest.mark.parametrize("name, total, active", [
    ("llama-3.1-8b", 8.03, 8.03), ("llama-3.1-70b", 70.6, 70.6), ("llama-3.1-405b", 405.9, 405.9),
    ("qwen3-30b-a3b", 30.5, 3.3), ("gpt-oss-120b", 116.8, 5.7), ("llama-4-scout", 107.8, 17.2),
])
def test_preset_parameter_counts_match_the_model_cards(name, total, active):
    model = planner.model(name)
    assert model.params() / 1e9 == pytest.approx(total, rel=0.01)
    assert model.params(active=True) / 1e9 == pytest.approx(active, rel=0.02)


def test_every_preset_names_its_source():
    for name in planner.presets():
        assert planner.model(name).source.startswith("http")


def test_an_unknown_preset_suggests_close_names():
    with pytest.raises(SpecError, match="llama-3.1-8b"):
        planner.model("llama-3.1-8")


def test_config_json_is_read_like_the_preset(tmp_path):
    config = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "hidden_act": "silu", "tie_word_embeddings": False, "max_position_embeddings": 131072}
    path = tmp_path / "llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    model = planner.model(str(path))
    assert model.params() == planner.model("llama-3.1-8b").params()
    assert model.seq == 8192 and model.name == "llama"


def test_config_json_moe_and_errors(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                                "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                                "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                                "num_experts_per_tok": 8}))
    assert planner.from_config(path).params() == planner.model("qwen3-30b-a3b").params()
    path.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        planner.from_config(path)
    path.write_text("{")
    with pytest.raises(ConfigError, match="not JSON"):
        planner.from_config(path)


def test_shapes_are_checked():
    with pytest.raises(ConfigError, match="kv_heads"):
        planner.Model(name="bad", hidden=64, layers=2, heads=6, kv_heads=4, ffn=128, vocab=10)
