"""Neuron tensors as the rest of trnsim.torch meets them: real PyTorch tensors on `neuron:N`
(PrivateUse1, renamed) over host memory that the C++ core (`trnsim.torch.native`) allocates.
These helpers move between a neuron tensor and a CPU tensor over the same memory, without copies."""

from __future__ import annotations

import torch

NAME = "neuron"
"""The device's name: PrivateUse1 renamed."""


def is_neuron(value) -> bool:
    """Whether `value` is a tensor on a neuron device."""
    return isinstance(value, torch.Tensor) and value.device.type == NAME


def is_sequence_lengths(value) -> bool:
    """A 1-D int64 tensor: the lengths / batch_sizes of a packed sequence, which PyTorch keeps on CPU."""
    return isinstance(value, torch.Tensor) and value.dtype == torch.int64 and value.dim() == 1


def to_neuron(cpu_tensor: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """A neuron tensor over a CPU tensor's memory (no copy), on `device` (default: the current one)."""
    from trnsim.torch import native

    core = native.load()
    return core.neuron_view(cpu_tensor, core.current_device() if device is None else device.index)


def buffer_of(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over a neuron tensor's memory (no copy); a CPU tensor is returned as it is, and
    so is a neuron tensor without memory (a fake one, while torch.compile traces)."""
    if tensor.device.type == NAME and type(tensor) in (torch.Tensor, torch.nn.Parameter):
        from trnsim.torch import native

        return native.load().cpu_view(tensor)
    return tensor
