"""The Hugging Face toolchain on neuron: save_pretrained / from_pretrained, and the ops generate()
and data pipelines reach (CPU index tensors, isin)."""

import warnings

import pytest
import torch

import trnsim.torch  # noqa: F401
from trnsim import config

transformers = pytest.importorskip("transformers")


def test_save_pretrained_then_from_pretrained_round_trips_bitwise(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).to("neuron")
    model.save_pretrained(tmp_path)  # safetensors: reads storages and data pointers
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).to("neuron")
    saved, back = model.state_dict(), loaded.state_dict()
    assert saved.keys() == back.keys()
    assert all(torch.equal(saved[k].cpu(), back[k].cpu()) for k in saved)


def test_a_neuron_tensor_takes_cpu_index_tensors_as_cuda_does():
    values = torch.arange(6.0).reshape(3, 2)
    on_device, rows = values.to("neuron"), torch.tensor([2, 0])
    assert torch.equal(on_device[rows].cpu(), values[rows]) and on_device[rows].device.type == "neuron"
    on_device[rows] = 7.0
    values[rows] = 7.0
    assert torch.equal(on_device.cpu(), values)
    with pytest.raises(trnsim.torch.DeviceMismatchError):
        on_device + values  # other ops still refuse a full CPU tensor


def test_isin_runs_on_the_device():
    elements, test = torch.arange(6), torch.tensor([1, 4])
    with config.override(strict=True), warnings.catch_warnings():
        warnings.simplefilter("error")
        found = torch.isin(elements.to("neuron"), test.to("neuron"))
    assert torch.equal(found.cpu(), torch.isin(elements, test))
