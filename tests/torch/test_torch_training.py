"""Whole models on neuron: a small GPT trained 20 steps (eager, compiled, bf16 autocast) and Hugging
Face models built from small configs, all against the same run on CPU."""

import copy

import pytest
import torch
import transformers
from conftest import assert_same
from torch_gpt import GPT, batches, train

from trnsim import config


def _pair(**kwargs):
    torch.manual_seed(0)
    model = GPT(**kwargs)
    return model, copy.deepcopy(model)


def _assert_same_parameters(neuron_model, cpu_model):
    for (name, got), expected in zip(neuron_model.named_parameters(), cpu_model.parameters(), strict=True):
        assert got.device.type == "neuron", name
        assert torch.equal(got.detach().cpu(), expected.detach()), name


def test_gpt_trains_20_steps_bitwise_equal_to_cpu():
    cpu_model, neuron_model = _pair()
    data = batches(4, batch=4, seq=32, vocab=256)
    expected = train(cpu_model, data, steps=20, device="cpu")
    with config.override(strict=True):
        got = train(neuron_model, data, steps=20, device="neuron")
    assert got == expected
    assert expected[-1] < expected[0] - 0.5
    _assert_same_parameters(neuron_model, cpu_model)
    assert neuron_model.head.weight is neuron_model.tok.weight


def test_a_deep_copied_neuron_model_is_independent_and_trains_like_the_original():
    """copy.deepcopy of any neuron model raised: the copy's set_ grew a one-element tensor."""
    cpu_model, neuron_model = _pair(layers=1, seq=16)
    neuron_model.to("neuron")
    twin = copy.deepcopy(neuron_model)
    _assert_same_parameters(twin, cpu_model)
    assert twin.head.weight is twin.tok.weight
    assert twin.head.weight.data_ptr() != neuron_model.head.weight.data_ptr()
    data = batches(2, batch=2, seq=16, vocab=256)
    expected = train(cpu_model, data, steps=3, device="cpu")
    with config.override(strict=True):
        assert train(twin, data, steps=3, device="neuron") == expected
        assert train(neuron_model, data, steps=3, device="neuron") == expected
    _assert_same_parameters(twin, cpu_model)
    _assert_same_parameters(neuron_model, cpu_model)


def test_compiled_gpt_trains_bitwise_equal_to_eager_cpu():
    cpu_model, neuron_model = _pair(layers=2, seq=16)
    data = batches(2, batch=2, seq=16, vocab=256)
    expected = train(cpu_model, data, steps=20, device="cpu")
    neuron_model.to("neuron")
    compiled = torch.compile(neuron_model, backend="neuron")
    with config.override(strict=True):
        got = train(compiled, data, steps=20, device="neuron")
    assert got == expected
    _assert_same_parameters(neuron_model, cpu_model)


def test_gpt_under_bf16_autocast_tracks_fp32_within_tolerance():
    cpu_model, neuron_model = _pair()
    data = batches(4, batch=4, seq=32, vocab=256)
    expected = train(cpu_model, data, steps=20, device="cpu")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        got = train(neuron_model, data, steps=20, device="neuron")
    assert got != expected, "autocast changed nothing: matmuls did not run in bf16"
    # Stated tolerance: every step's loss within 2% of the fp32 run (bf16 keeps 8 significant bits).
    for step, (low, full) in enumerate(zip(got, expected, strict=True)):
        assert abs(low - full) <= 0.02 * abs(full), (step, low, full)
    assert all(p.dtype == torch.float32 for p in neuron_model.parameters())


def _hugging_face_model(family):
    """A tiny Hugging Face model of `family` (built on CPU) and its inputs, labels included."""
    ids = torch.randint(0, 128, (2, 12))
    if family == "llama":
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                       max_position_embeddings=64)
        cls = transformers.LlamaForCausalLM
    elif family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64)
        cls = transformers.GPT2LMHeadModel
    elif family == "bert":  # attention with a padding mask takes SDPA's math path
        cfg = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=128)
        cls = transformers.BertForMaskedLM
    elif family == "qwen3_moe":  # experts through aten._grouped_mm
        cfg = transformers.Qwen3MoeConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                          head_dim=16, moe_intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                                          num_experts_per_tok=2)
        cls = transformers.Qwen3MoeForCausalLM
    elif family == "convbert":  # span-based dynamic convolution: im2col, col2im
        cfg = transformers.ConvBertConfig(vocab_size=128, hidden_size=64, embedding_size=64,
                                          num_hidden_layers=1, num_attention_heads=4, intermediate_size=128)
        cls = transformers.ConvBertForMaskedLM
    elif family == "vit":  # the class token, a parameter, is expanded (a view) in every forward
        cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=128, image_size=32, patch_size=8, num_labels=3)
        return transformers.ViTForImageClassification(cfg), {"pixel_values": torch.randn(2, 3, 32, 32),
                                                             "labels": torch.tensor([0, 2])}
    else:  # wav2vec2: a weight-normed positional convolution, CTC loss
        cfg = transformers.Wav2Vec2Config(vocab_size=32, hidden_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
                                          conv_stride=(5, 2), conv_kernel=(10, 3),
                                          num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)
        return transformers.Wav2Vec2ForCTC(cfg), {"input_values": torch.randn(2, 1600),
                                                  "labels": torch.randint(1, 32, (2, 5))}
    cfg.attn_implementation = "sdpa"
    return cls(cfg), {"input_ids": ids, "labels": ids}


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert", "qwen3_moe", "convbert", "vit", "wav2vec2"])
def test_hugging_face_model_forward_and_backward_match_cpu(family):
    """Also under inference_mode, where a view of a parameter or buffer (Llama's rotary inv_freq,
    ViT's class token) raised "Cannot set version_counter for inference tensor"."""
    torch.manual_seed(0)
    cpu_model, inputs = _hugging_face_model(family)
    cpu_model.eval()
    neuron_model = copy.deepcopy(cpu_model).to("neuron")
    on_neuron = {name: value.to("neuron") for name, value in inputs.items()}
    expected = cpu_model(**inputs)
    expected.loss.backward()
    with torch.inference_mode():
        expected_inference = cpu_model(**inputs).logits
    with config.override(strict=True):
        got = neuron_model(**on_neuron)
        got.loss.backward()
        with torch.inference_mode():
            got_inference = neuron_model(**on_neuron).logits
    assert_same([got.logits.detach(), got_inference, got.loss.detach()],
                [expected.logits.detach(), expected_inference, expected.loss.detach()])
    assert_same([p.grad for p in neuron_model.parameters()], [p.grad for p in cpu_model.parameters()])
