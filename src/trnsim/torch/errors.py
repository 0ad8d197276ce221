"""The torch device's one error of its own: tensors of two devices in one op."""

from __future__ import annotations

from trnsim.errors import TrnsimError


class DeviceMismatchError(TrnsimError, RuntimeError):
    """An op got neuron tensors and a CPU tensor that is not 0-dim, or tensors of two neuron
    devices, as CUDA would refuse (or `nki_call` got a CPU tensor of any shape: a kernel reads only
    device memory).

    Example: ``torch.ones(3, device="neuron") + torch.ones(3)``. Fix: move the tensor with
    ``.to("neuron")`` (0-dim CPU tensors, such as Python-scalar-like values, are allowed).
    """

    anchor = "devicemismatcherror"

    def __init__(self, op, tensor, argument: str | None = None, on=None):
        self.op = str(op)
        self.shape = tuple(tensor.shape)
        on = str(on) if on is not None else "neuron"
        got = f"a {tensor.device} tensor of shape {list(self.shape)}"
        if argument is None:  # an eager op, which allows 0-dim CPU tensors
            message, allowed = f"a {on} tensor and {got}", " (only 0-dim CPU tensors may be mixed in)"
        else:  # a kernel argument: every tensor must be on the device
            message, allowed = f"{got} as {argument}, where it takes neuron tensors", ""
        super().__init__(f"Expected all tensors to be on the same device, but {self.op} got {message}",
                         hint=f"move it with .to('{on}'){allowed}; see docs/errors.md#devicemismatcherror")
