"""`torch.compile(model, backend="neuron")`: AOTAutograd splits forward and backward into aten
graphs; each is lowered to the emulator's kernels (the same table eager mode uses). The shapes of
every node are taken once, when the graph is lowered, so a profile charges a whole graph per call
(`LoweredGraph.device_s` gives the graph-level time directly).

AOTAutograd hands the compiled graphs the CPU buffers inside the neuron tensors, so factory nodes
that name `device=neuron` are rewritten to the buffers' device before the graph runs.
"""

from __future__ import annotations

import torch
from torch import fx

from trnsim.torch import ops, profiler
from trnsim.torch.tensor import CPU


def _on_buffers(value):
    """A node argument with the neuron device replaced by the buffers' device."""
    if isinstance(value, torch.device) and value.type == "neuron":
        return CPU
    if isinstance(value, (list, tuple)):
        return type(value)(_on_buffers(v) for v in value)
    return value


def rewrite_devices(graph: fx.Graph) -> int:
    """Point every `device=neuron` argument of the graph at CPU; returns how many nodes changed."""
    changed = 0
    for node in graph.nodes:
        args, kwargs = _on_buffers(node.args), {k: _on_buffers(v) for k, v in node.kwargs.items()}
        if args != node.args or kwargs != node.kwargs:
            node.args, node.kwargs = args, kwargs
            changed += 1
    return changed


def _value(arg):
    if isinstance(arg, fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, list | tuple):
        return [_value(a) for a in arg]
    return arg


def _signature(node: fx.Node) -> tuple[str, tuple, tuple]:
    """The op and the (shape, dtype) of its tensor inputs and outputs, from the traced values."""
    inputs = profiler.signature([_value(a) for a in (*node.args, *node.kwargs.values())])
    return str(node.target), inputs, profiler.output_signature(node.meta.get("val"))


class LoweredGraph(fx.Interpreter):
    """One forward or backward graph, run node by node through the emulator's kernel table."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        calls = [n for n in gm.graph.nodes
                 if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]
        self.signatures = [_signature(n) for n in calls]
        self._kernels = {n.target: ops.kernel_for(n.target) for n in calls}

    def call_function(self, target, args, kwargs):
        kernel = self._kernels.get(target)
        if kernel is None:
            return target(*args, **kwargs)
        return kernel(target, args, kwargs)

    def device_s(self, target: str = "trn2", lnc: int = 1) -> float:
        """Device time of one run of this graph on `target`, from its nodes' shapes."""
        from trnsim.torch import devicetime

        return sum(devicetime.op_time_s(op, inputs, outputs, target, lnc)
                   for op, inputs, outputs in self.signatures)

    def __call__(self, args):
        active = profiler.ACTIVE.get()
        if active is not None:
            for op, inputs, outputs in self.signatures:
                active.record_signature(op, inputs, outputs)
        return self.boxed_run(args)


def lower(gm: fx.GraphModule, example_inputs) -> LoweredGraph:
    """AOTAutograd's compiler hook for both the forward and the backward graph."""
    rewrite_devices(gm.graph)
    gm.recompile()
    lowered = LoweredGraph(gm)
    lowered._boxed_call = True
    return lowered


def neuron_backend(gm: fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend registered under the name "neuron" (entry point torch_dynamo_backends)."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=lower, bw_compiler=lower, **kwargs)(gm, example_inputs)
