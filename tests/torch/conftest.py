"""Shared fixtures of the neuron-device tests: importing trnsim.torch registers the device."""

import pytest
import torch

import trnsim.torch


@pytest.fixture(autouse=True)
def _fresh_fallback_counts():
    trnsim.torch.reset_fallback_counts()
    yield


def assert_same(neuron_value, cpu_value):
    """Bitwise equality of a neuron result (tensor, or nested tuple/list of them) with CPU's."""
    if isinstance(cpu_value, torch.Tensor):
        assert neuron_value.device.type == "neuron", neuron_value.device
        assert neuron_value.dtype == cpu_value.dtype
        assert torch.equal(neuron_value.cpu(), cpu_value), (neuron_value.cpu() - cpu_value).abs().max()
    elif isinstance(cpu_value, (list, tuple)):
        assert len(neuron_value) == len(cpu_value)
        for n, c in zip(neuron_value, cpu_value, strict=True):
            assert_same(n, c)
    else:
        assert neuron_value == cpu_value
