"""`torch.compile(model, backend="neuron")`: AOTAutograd splits forward and backward into aten
graphs, which run node by node on the device as eager mode would. Inside a profile every node is
charged at the shapes it runs with; `LoweredGraph.device_s` gives a graph's time at the shapes it
was traced with, without running it.
"""

from __future__ import annotations

import torch
from torch import fx

from trnsim.torch import native, profiler


def _traced_size(size) -> int:
    """A size as traced. A data-dependent one (nonzero's row count) has no traced value: it takes
    the value inductor assumes for such sizes (torch._inductor.config.unbacked_symint_fallback)."""
    if isinstance(size, int):
        return size
    if size.node.hint is not None:
        return size.node.hint
    from torch._inductor import config as inductor_config

    return inductor_config.unbacked_symint_fallback


def _example(value):
    """A traced value as a plain-shaped stand-in: symbolic sizes take the size they were traced at."""
    if isinstance(value, torch.Tensor):
        shape = tuple(map(_traced_size, value.shape))
        return torch.empty(shape, dtype=value.dtype, device="meta")
    if isinstance(value, list | tuple):
        return [_example(v) for v in value]
    return value


def _value(arg):
    if isinstance(arg, fx.Node):
        return _example(arg.meta.get("val"))
    if isinstance(arg, list | tuple):
        return [_value(a) for a in arg]
    return arg


def signature_of(node: fx.Node) -> tuple[str, tuple, tuple]:
    """The op and the (shape, dtype) of its tensor inputs and outputs, at the traced sizes."""
    inputs = profiler.signature([_value(a) for a in node.args])
    return str(node.target), inputs, profiler.output_signature(_example(node.meta.get("val")))


class LoweredGraph(fx.Interpreter):
    """One forward or backward graph, run node by node on the device."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        calls = [n for n in gm.graph.nodes
                 if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]
        self.signatures = [signature_of(n) for n in calls]
        self.active: profiler.Profile | None = None

    def call_function(self, target, args, kwargs):
        if not isinstance(target, torch._ops.OpOverload):
            return target(*args, **kwargs)
        out = target._op(*args, **kwargs)  # `_op` skips the OpOverload's own Python call frame
        if self.active is not None:
            self.active.record(target, args, out)
        return out

    def device_s(self, target: str = "trn2", lnc: int = 1) -> float:
        """Device time of one run of this graph on `target`, from its nodes' shapes."""
        from trnsim.torch import devicetime

        return sum(devicetime.op_time_s(op, inputs, outputs, target, lnc)
                   for op, inputs, outputs in self.signatures)

    def __call__(self, args):
        self.active = profiler.current()
        try:
            with native.unrecorded():  # the graph charges its nodes itself
                return self.boxed_run(args)
        finally:
            self.active = None


def lower(gm: fx.GraphModule, example_inputs) -> LoweredGraph:
    """AOTAutograd's compiler hook for both the forward and the backward graph."""
    lowered = LoweredGraph(gm)
    lowered._boxed_call = True
    return lowered


def neuron_backend(gm: fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend registered under the name "neuron" (entry point torch_dynamo_backends).

    `torch.compile`'s mode= and options= arrive as kwargs; the lowering has no settings they could
    select, so they go to the AOTAutograd backend's call, which ignores them with a warning, as
    every AOTAutograd backend (aot_eager) does. They are not AOTAutograd's own settings."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=lower, bw_compiler=lower)(gm, example_inputs, **kwargs)
