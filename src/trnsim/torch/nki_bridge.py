"""NKI kernels on neuron tensors: `trnsim.torch.nki_call(kernel, *tensors)`.

The kernel runs in the NKI emulator on CPU views of the neuron tensors' memory (inputs it writes
are updated in place, as on the device), its results come back as neuron tensors, and inside a
`profile` block its instruction trace is charged to the device time (re-timed per target like every
other op). This is how a custom kernel is used from a PyTorch model on Trainium; autograd does not
see through a kernel, so wrap it in a `torch.autograd.Function` to train through it.
"""

from __future__ import annotations

import torch

from trnsim.torch import profiler
from trnsim.torch.errors import DeviceMismatchError
from trnsim.torch.tensor import buffer_of, is_neuron, to_neuron


def _to_device(value):
    if isinstance(value, torch.Tensor):
        return to_neuron(value)
    if type(value) in (list, tuple):
        return type(value)(_to_device(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v) for k, v in value.items()}
    return value


def _refuse_off_device(kernel, args, kwargs) -> None:
    """A kernel reads the device's memory: a CPU tensor argument is refused as an eager op refuses
    it (DeviceMismatchError), rather than silently moved."""
    named = [(f"argument {i}", v) for i, v in enumerate(args)]
    named += [(f"argument {k!r}", v) for k, v in kwargs.items()]
    for argument, value in named:
        if isinstance(value, torch.Tensor) and not is_neuron(value):
            raise DeviceMismatchError(f"nki_call({getattr(kernel, '__name__', kernel)})", value, argument)


def nki_call(kernel, *args, target: str | None = None, **kwargs):
    """Run `kernel` (an `nki.jit` function) on neuron tensors; returns neuron tensors. A CPU
    tensor argument raises DeviceMismatchError.

    target: the generation to emulate (default: the active profile's, else NKI's own default).
    """
    from trnsim import nki  # imported on first use: `import torch` autoloads this package

    _refuse_off_device(kernel, args, kwargs)
    active = profiler.current()
    target = target or (active.target if active is not None else None)
    compiled = nki.jit(kernel)
    inputs = [buffer_of(a) for a in args]
    results = compiled(*inputs, target=target, **{k: buffer_of(v) for k, v in kwargs.items()})
    if active is not None:
        active.record_trace(f"nki.{compiled.__name__}", compiled.last_trace)
    return _to_device(results)
