"""torch.compile(backend="neuron"): graphs lowered to the emulator's kernels, factory devices
rewritten, graph-level device time."""

import pytest
import torch

import trnsim.torch
from trnsim.torch import compile as neuron_compile
from trnsim.torch import devicetime


def _mlp(x, w):
    bias = torch.zeros(w.shape[0], device=x.device)  # a factory inside the graph
    return torch.nn.functional.gelu(x @ w.t() + bias).sum(dim=1)


def test_compiled_function_with_a_factory_matches_eager_cpu_forward_and_backward():
    torch.manual_seed(0)
    x, w = torch.randn(6, 16), torch.randn(8, 16, requires_grad=True)
    expected = _mlp(x, w)
    expected.sum().backward()
    w_neuron = w.detach().to("neuron").requires_grad_(True)
    got = torch.compile(_mlp, backend="neuron")(x.to("neuron"), w_neuron)
    got.sum().backward()
    assert isinstance(got, trnsim.torch.NeuronTensor)
    assert torch.equal(got.detach().cpu(), expected.detach())
    assert torch.equal(w_neuron.grad.cpu(), w.grad)


def test_lowering_rewrites_neuron_devices_and_times_the_whole_graph(monkeypatch):
    lowered = []
    original = neuron_compile.lower

    def spy(gm, example_inputs):
        graph = original(gm, example_inputs)
        lowered.append(graph)
        return graph

    monkeypatch.setattr(neuron_compile, "lower", spy)
    x, w = torch.randn(6, 16, device="neuron"), torch.randn(8, 16, device="neuron")
    torch.compile(_mlp, backend="neuron")(x, w)
    (graph,) = lowered
    devices = [n.kwargs.get("device") for n in graph.module.graph.nodes if "device" in n.kwargs]
    assert devices and all(d == torch.device("cpu") for d in devices)
    expected = sum(devicetime.op_time_s(op, ins, outs, "trn2") for op, ins, outs in graph.signatures)
    assert graph.device_s("trn2") == pytest.approx(expected) and expected > 0
    assert any(op == "aten.mm.default" for op, _, _ in graph.signatures)
