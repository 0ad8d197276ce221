"""The torch device's one error of its own: tensors of two devices in one op."""

from __future__ import annotations

from trnsim.errors import TrnsimError


class DeviceMismatchError(TrnsimError, RuntimeError):
    """An op got neuron tensors and a CPU tensor that is not 0-dim, as CUDA would refuse.

    Example: ``torch.ones(3, device="neuron") + torch.ones(3)``. Fix: move the CPU tensor with
    ``.to("neuron")`` (0-dim CPU tensors, such as Python-scalar-like values, are allowed).
    """

    anchor = "devicemismatcherror"

    def __init__(self, op, tensor):
        self.op = str(op)
        self.shape = tuple(tensor.shape)
        super().__init__(
            f"Expected all tensors to be on the same device, but {self.op} got a neuron tensor and a "
            f"{tensor.device} tensor of shape {list(self.shape)}",
            hint="move it with .to('neuron') (only 0-dim CPU tensors may be mixed in); "
                 "see docs/errors.md#devicemismatcherror")
