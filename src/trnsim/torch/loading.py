"""`torch.load(..., map_location="neuron")`: the checkpoint loads onto CPU, then every tensor in
it moves to the neuron device the caller named, as it would on CUDA.

Storages cannot live on a device written in Python (there is no allocator behind it), so
PyTorch's own path, which builds each storage on the target device, cannot work. `torch.load` is
wrapped: a `map_location` that names a neuron device (a string or a torch.device) loads with
`map_location="cpu"` and moves the result; every other call goes to PyTorch unchanged. A dict or
callable `map_location` that leads to neuron still reaches PyTorch's path and is refused with the
way out (device.py).
"""

from __future__ import annotations

import copy
import functools

import torch

from trnsim.torch.tensor import NAME


def install() -> None:
    """Wrap `torch.load` (and `torch.serialization.load`, the same function) once."""
    if getattr(torch.load, "_trnsim_original", None) is not None:
        return
    original = torch.load

    @functools.wraps(original)
    def load(f, map_location=None, *args, **kwargs):
        device = _neuron_device(map_location)
        if device is None:
            return original(f, map_location, *args, **kwargs)
        return _moved(original(f, "cpu", *args, **kwargs), device, {})

    load._trnsim_original = original
    torch.load = torch.serialization.load = load


def _neuron_device(location) -> torch.device | None:
    """The neuron device a string or torch.device `map_location` names, else None."""
    if isinstance(location, str) and location.split(":")[0] in (NAME, "privateuseone"):
        return torch.device(location)
    if isinstance(location, torch.device) and location.type == NAME:
        return location
    return None


def _moved(obj, device: torch.device, seen: dict):
    """`obj` with its tensors on `device`: containers rebuilt (a state dict keeps its
    `_metadata`), modules moved in place, each tensor object moved once (tied entries stay one
    tensor), leaves keeping `requires_grad`."""
    key = id(obj)
    if key in seen:
        return seen[key]
    if isinstance(obj, torch.nn.Module):
        moved = obj.to(device)
    elif isinstance(obj, torch.nn.Parameter):
        moved = torch.nn.Parameter(obj.detach().to(device), requires_grad=obj.requires_grad)
    elif isinstance(obj, torch.Tensor):
        moved = obj.detach().to(device).requires_grad_(obj.requires_grad)
    elif isinstance(obj, dict):
        moved = copy.copy(obj)
        for name, value in obj.items():
            moved[name] = _moved(value, device, seen)
    elif isinstance(obj, list):
        moved = [_moved(value, device, seen) for value in obj]
    elif isinstance(obj, tuple):
        values = [_moved(value, device, seen) for value in obj]
        moved = type(obj)(*values) if hasattr(obj, "_fields") else type(obj)(values)
    else:
        moved = obj
    seen[key] = moved
    return moved
