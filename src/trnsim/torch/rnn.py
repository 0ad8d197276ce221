"""Recurrent layers (`nn.LSTM`, `nn.GRU`, `nn.RNN`) on neuron: the whole aten op on CPU views.

On a device other than CPU, PyTorch's recurrent ops step through fused cell kernels that only CUDA
has (`_thnn_fused_lstm_cell`), and CPU itself runs them through oneDNN (`mkldnn_rnn`): neither
decomposes into ops trnsim could run with CPU's bits. So trnsim takes the op before it decomposes
(a kernel on the AutogradPrivateUse1 key) and runs CPU's implementation on CPU views under CPU
autograd; the backward asks that CPU graph for the gradients. Outputs and gradients are CPU's, bit
for bit. The profiler charges the forward as its matmuls and gate arithmetic (devicetime's "rnn"
recipe) and the backward, recorded as `<op>.backward`, as twice that.
"""

from __future__ import annotations

import torch

from trnsim.errors import UnsupportedError
from trnsim.torch import profiler
from trnsim.torch.errors import DeviceMismatchError
from trnsim.torch.tensor import buffer_of, is_neuron, is_sequence_lengths, to_neuron

OVERLOADS = ("lstm.input", "lstm.data", "gru.input", "gru.data", "rnn_tanh.input", "rnn_tanh.data",
             "rnn_relu.input", "rnn_relu.data", "lstm_cell", "gru_cell")
"""lstm_cell and gru_cell too: on a PrivateUse1 device PyTorch's cells call the fused CUDA-style
kernels (_thnn_fused_lstm_cell), which CPU does not have."""


def register(kernels: torch.library.Library, key: str = "AutogradPrivateUse1") -> None:
    for name in OVERLOADS:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        kernels.impl(name, _on_buffers(op), key)


class Backward:
    """Stands for an op's backward in the profiler's record, which keys ops by name."""

    namespace = "aten"

    def __init__(self, op):
        self.op = op

    def __str__(self) -> str:
        return f"{self.op}.backward"


def _is_tensor_list(value) -> bool:
    return type(value) in (list, tuple) and all(isinstance(v, torch.Tensor) for v in value) and bool(value)


def _tensors(args) -> list[torch.Tensor]:
    found = []
    for value in args:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif _is_tensor_list(value):
            found.extend(value)
    return found


def _rebuild(args, tensors) -> list:
    """`args` with their tensors (lists included) replaced, in order, by `tensors`."""
    replacing = iter(tensors)
    return [next(replacing) if isinstance(value, torch.Tensor)
            else [next(replacing) for _ in value] if _is_tensor_list(value) else value for value in args]


def _on_buffers(op):
    def kernel(*args):
        tensors = _tensors(args)
        for tensor in tensors:  # only a packed sequence's batch_sizes may be on CPU, as on CUDA
            if not is_neuron(tensor) and not is_sequence_lengths(tensor):
                raise DeviceMismatchError(op, tensor)
        # CPU's oneDNN path computes differently with gradients on and off: run it as the caller does.
        outputs = _CpuGraph.apply(op, args, torch.is_grad_enabled(), *tensors)
        return outputs[0] if single else outputs
    single = len(op._schema.returns) == 1
    return kernel


class _CpuGraph(torch.autograd.Function):
    """Forward: the op on CPU leaves that share the buffers' memory; backward: their gradients."""

    @staticmethod
    def forward(ctx, op, args, grad_enabled, *tensors):
        leaves = [buffer_of(t).detach().requires_grad_(t.requires_grad) if t.is_floating_point()
                  else buffer_of(t) for t in tensors]
        with torch.set_grad_enabled(grad_enabled):
            outputs = op(*_rebuild(args, leaves))
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        active = profiler.current()
        if active is not None:
            active.record(op, _rebuild(args, [leaf.detach() for leaf in leaves]), outputs)
        ctx.op, ctx.args, ctx.leaves, ctx.outputs = op, args, leaves, outputs
        device = next(t.device for t in tensors if is_neuron(t))
        return tuple(to_neuron(output.detach(), device) for output in outputs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # create_graph=True: the CPU gradients below would not carry a graph
            raise UnsupportedError(f"a second derivative through {ctx.op} (backward with "
                                   "create_graph=True, e.g. a gradient penalty) is not emulated on neuron",
                                   what=f"{ctx.op} double backward", hint="compute it on CPU")
        wanted = [k for k, leaf in enumerate(ctx.leaves) if leaf.requires_grad]
        pairs = [(output, buffer_of(grad)) for output, grad in zip(ctx.outputs, grads, strict=True)
                 if grad is not None and output.requires_grad]
        # The CPU graph is kept (it lives as long as this node does) so that a second backward
        # through a retained graph finds it, as on CPU.
        found = torch.autograd.grad([output for output, _ in pairs], [ctx.leaves[k] for k in wanted],
                                    [grad for _, grad in pairs], allow_unused=True, retain_graph=True)
        active = profiler.current()
        if active is not None:
            active.record(Backward(ctx.op), _rebuild(ctx.args, [leaf.detach() for leaf in ctx.leaves]),
                          [grad for grad in found if grad is not None])
        device = next(g.device for g in grads if is_neuron(g))
        result = [None] * len(ctx.leaves)
        for k, grad in zip(wanted, found, strict=True):
            result[k] = None if grad is None else to_neuron(grad, device)
        return (None, None, None, *result)
