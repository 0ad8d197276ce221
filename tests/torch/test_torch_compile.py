"""torch.compile(backend="neuron"): graphs run node by node on the device, each node charged,
graph-level device time."""

import pytest
import torch

import trnsim.torch
from trnsim import config
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
    assert got.device.type == "neuron"
    assert torch.equal(got.detach().cpu(), expected.detach())
    assert torch.equal(w_neuron.grad.cpu(), w.grad)


def test_lowering_keeps_neuron_factories_and_times_the_whole_graph(monkeypatch):
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
    assert devices and all(d.type == "neuron" for d in devices)
    expected = sum(devicetime.op_time_s(op, ins, outs, "trn2") for op, ins, outs in graph.signatures)
    assert graph.device_s("trn2") == pytest.approx(expected) and expected > 0
    assert any(op == "aten.mm.default" for op, _, _ in graph.signatures)


def test_compiled_autocast_and_bf16_graphs_match_eager_neuron():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("neuron")
    x = torch.randn(8, 32, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        eager = model(x)
        compiled = torch.compile(model, backend="neuron")(x)
    assert eager.dtype == compiled.dtype == torch.bfloat16
    assert torch.equal(eager.cpu(), compiled.cpu())


def test_dynamic_shapes_are_charged_at_the_sizes_each_call_runs_with():
    layer = torch.nn.Linear(16, 8).to("neuron")
    compiled = torch.compile(layer, backend="neuron", dynamic=True)
    sizes = (4, 12)
    with trnsim.torch.profile(target="trn2") as prof:
        for rows in sizes:
            compiled(torch.randn(rows, 16, device="neuron"))
    shapes = sorted(key[1][1][0] for key in prof.counts if key[0] == "aten.addmm.default")
    assert shapes == [(4, 16), (12, 16)]
    assert prof.report().per_op["aten.addmm.default"].count == 2


def test_functional_copies_in_compiled_graphs_run_on_the_device_and_are_timed():
    """AOTAutograd writes copy_ as aten.copy and torch.tensor constants as lift_fresh_copy: both
    fell back to CPU (an UnsupportedError in strict mode) and showed as untimed."""
    def f(x, y):
        z = x.clone()
        z[:2].copy_(y)
        return z * 2 + torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)

    x, y = torch.randn(4, 4, device="neuron"), torch.randn(2, 4, device="neuron")
    compiled = torch.compile(f, backend="neuron")
    with config.override(strict=True), trnsim.torch.profile(target="trn2") as prof:
        out = compiled(x, y)
    assert torch.equal(out.cpu(), f(x.cpu(), y.cpu())) and not prof.report().untimed


@pytest.mark.parametrize("settings", [dict(mode="reduce-overhead"), dict(options={"max_autotune": True})])
def test_mode_and_options_are_ignored_as_every_aot_autograd_backend_ignores_them(settings):
    """They were passed to aot_autograd as its own settings: aot_module_simplified's TypeError."""
    torch._dynamo.reset()
    layer = torch.nn.Linear(4, 4).to("neuron")
    x = torch.randn(2, 4, device="neuron")
    assert torch.equal(torch.compile(layer, backend="neuron", **settings)(x).cpu(), layer(x).cpu())


def test_data_dependent_shapes_compile_and_are_charged_at_their_run_sizes():
    """compile._example read the traced size of nonzero's row count, which has none (TypeError)."""
    def positives(x):
        return torch.nonzero(x > 0).float().sum() * (x > 0).sum().item()

    torch._dynamo.reset()
    x = torch.tensor([[1.0, -1.0], [2.0, 3.0]])
    with torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        with trnsim.torch.profile() as prof:
            out = torch.compile(positives, backend="neuron", fullgraph=True)(x.to("neuron"))
    assert torch.equal(out.cpu(), positives(x))
    assert any(key[0] == "aten.nonzero.default" and key[2] == (((3, 2), "int64"),) for key in prof.counts)
