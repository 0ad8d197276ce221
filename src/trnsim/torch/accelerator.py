"""`torch.accelerator`'s memory and synchronisation calls when the current accelerator is neuron.

PyTorch answers them from a device's C++ caching allocator, which the neuron device does not have
(its memory is plain host memory): they would stop in an INTERNAL ASSERT. They are answered here
instead, from the same figures as `torch.neuron`: memory in use and its peak are what the device's
allocator counts (there is no cache, so reserved equals allocated and emptying it frees nothing),
the total is the device's share of the emulated chip's HBM, and there is nothing to wait for.
Accumulated statistics (`memory_stats`) are refused: the allocator keeps no history. With another
current accelerator every call goes to PyTorch unchanged.
"""

from __future__ import annotations

import functools
import importlib

import torch

from trnsim.errors import UnsupportedError
from trnsim.torch.tensor import NAME


def _nothing(*_args, **_kwargs) -> None:
    """Every op has finished when it returns, and no memory is cached."""


NO_HISTORY = ("memory_stats", "reset_accumulated_memory_stats")
"""Memory calls that need a history of allocations: refused in torch.accelerator and torch.neuron."""


def no_history(name: str):
    """The refusal of `name` (a qualified function name), one of NO_HISTORY."""
    def refuse(*_args, **_kwargs):
        raise UnsupportedError(f"{name} on neuron: the device counts the memory in use and its peak, "
                               "not a history of allocations", what=name,
                               hint="torch.neuron.memory_allocated() and max_memory_allocated() give "
                                    "the memory in use and its peak")
    return refuse


def _from_device_module(name: str):
    """The answer `torch.neuron.<name>` gives."""
    def answer(*args, **kwargs):
        return getattr(getattr(torch, NAME), name)(*args, **kwargs)
    return answer


ANSWERS = {
    "empty_cache": _nothing,
    "synchronize": _nothing,
    "get_memory_info": _from_device_module("mem_get_info"),
    **{name: _from_device_module(name) for name in (
        "memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved",
        "reset_peak_memory_stats", *NO_HISTORY)},
}
"""torch.accelerator function -> its answer for the neuron device."""


def install() -> None:
    """Route each function of ANSWERS, in `torch.accelerator` and the submodule defining it."""
    for name, answer in ANSWERS.items():
        original = getattr(torch.accelerator, name)
        if getattr(original, "_trnsim_original", None) is not None:
            continue
        routed = _routed(original, answer)
        setattr(torch.accelerator, name, routed)
        home = importlib.import_module(original.__module__)
        if getattr(home, name, None) is original:
            setattr(home, name, routed)


def _routed(original, answer):
    @functools.wraps(original)
    def call(*args, **kwargs):
        accelerator = torch.accelerator.current_accelerator()
        if accelerator is None or accelerator.type != NAME:
            return original(*args, **kwargs)
        return answer(*args, **kwargs)

    call._trnsim_original = original
    return call
