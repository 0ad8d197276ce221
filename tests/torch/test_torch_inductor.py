"""Graphs compiled by the default torch.compile backend (inductor) from neuron tensors are charged
to trnsim.torch.profile like the same ops run eagerly; CPU graphs are compiled as before."""

import shutil

import pytest
import torch
from torch import nn

import trnsim.torch

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                       reason="inductor's CPU backend needs a C++ compiler"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]


def _model():
    """Two bias-free linears: inductor calls extern matmuls and compiles no C++ kernel, so the
    test takes seconds, not tens of them."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 32, bias=False), nn.Linear(32, 8, bias=False))


def _profiled_step(model, x):
    with trnsim.torch.profile(target="trn2") as prof:
        model(x).sum().backward()
    return prof.report("trn2")


def test_an_inductor_graph_on_neuron_is_charged_as_its_eager_ops():
    eager = _model().to("neuron")
    compiled = torch.compile(_model().to("neuron"))
    x = torch.randn(16, 32, device="neuron")
    compiled(x).sum().backward()  # compiles forward and backward
    seen, expected = _profiled_step(compiled, x), _profiled_step(eager, x)
    assert seen.per_op["aten.mm.default"].count == expected.per_op["aten.mm.default"].count == 5
    assert seen.matmul_s == pytest.approx(expected.matmul_s)
    assert seen.total_s == pytest.approx(expected.total_s, rel=0.5)


def test_cpu_graphs_compile_unchanged_and_the_hook_is_gone_after_a_neuron_compile():
    from torch._inductor import compile_fx

    entry = compile_fx.compile_fx
    torch.compile(_model().to("neuron"))(torch.randn(4, 32, device="neuron"))
    assert compile_fx.compile_fx is entry
    model, x = _model(), torch.randn(4, 32)
    assert torch.allclose(torch.compile(model)(x), model(x))


def test_compile_modes_that_pass_their_own_inner_compiler_work():
    """mode="reduce-overhead" (and max-autotune) call compile_fx with inner_compile=: trnsim's
    profiling hook passed it twice (TypeError)."""
    torch._dynamo.reset()
    model = _model().to("neuron")
    x = torch.randn(4, 32, device="neuron")
    out = torch.compile(model, mode="reduce-overhead")(x)
    assert out.device.type == "neuron" and torch.allclose(out.cpu(), model(x).cpu())


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_compile_modes_charge_each_node_once(mode):
    """compile_fx calls itself for these modes with the inner compiler trnsim had wrapped, which was
    wrapped again: every node was charged twice."""
    torch._dynamo.reset()
    compiled = torch.compile(_model().to("neuron"), mode=mode)
    x = torch.randn(16, 32, device="neuron")
    compiled(x).sum().backward()
    assert _profiled_step(compiled, x).per_op["aten.mm.default"].count == 5
