"""NeuronTensor: a tensor on `neuron:0` whose values live in one CPU tensor held by the emulator.

Every aten op on it reaches `__torch_dispatch__`, which asks the op table (`trnsim.torch.ops`) for
the rule to run. The unwrap/wrap helpers here are the hot path: they avoid pytree and allocate only
what the op needs (baselines.md row 6 measured this at about 6 µs per op).
"""

from __future__ import annotations

import torch

from trnsim.errors import UnsupportedError
from trnsim.torch.errors import DeviceMismatchError

NAME = "neuron"
"""The device's name: PrivateUse1 renamed."""
DEVICE = torch.device("privateuseone", 0)  # prints as neuron:0 once the backend is renamed
CPU = torch.device("cpu")
# The process's current device (`torch.neuron.set_device`): where factories without an index and
# results of ops without a neuron input land. One entry, replaced in place.
CURRENT = [DEVICE]
# OpOverload -> the rule that runs it; filled on first use by trnsim.torch.ops.resolve.
RULES: dict = {}


class NeuronTensor(torch.Tensor):
    """A neuron tensor. `_elem` is the emulator's buffer (a CPU tensor with the same shape/strides)."""

    _elem: torch.Tensor
    _device: torch.device  # the wrapper's device, kept as a plain attribute: `.device` costs ~1 us

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool | None = None,
                device: torch.device | None = None):
        """`NeuronTensor(buffer, device=None)` wraps a CPU buffer. Given `requires_grad`, it is the
        call `type(param)(data, requires_grad=...)` by which libraries (accelerate's offload hooks)
        rebuild a parameter: PyTorch keeps a subclass's type for its parameters, so a neuron
        parameter's type is NeuronTensor, and the call makes `nn.Parameter(data, requires_grad)`
        on data's device, as it does on CUDA, where the type is Parameter."""
        if requires_grad is not None:
            return torch.nn.Parameter(elem, requires_grad)
        if isinstance(elem, NeuronTensor):
            raise TypeError("a NeuronTensor cannot wrap another NeuronTensor")
        out = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=device or CURRENT[0])
        out._elem, out._device = elem, device or CURRENT[0]
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        rule = RULES.get(func)
        if rule is None:
            from trnsim.torch.ops import resolve

            rule = RULES[func] = resolve(func)
        return rule(func, args, kwargs or {})

    @property
    def data(self):
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new):
        # PyTorch swaps the wrapper's metadata only; the buffer must follow, or reads stay stale.
        # Like CPU's set_data it shares `new`'s memory, not its tensor: an own alias of the buffer,
        # so that a later unsqueeze_ or t_ of one tensor leaves the other's layout alone.
        torch.Tensor.data.__set__(self, new)
        self._elem, self._device = new._elem.detach(), new._device

    def untyped_storage(self):
        """The buffer's storage: Python code that frees and regrows storage (FSDP2's resize_) or
        compares data pointers (safetensors, save_pretrained) sees the device memory's stand-in.
        Dynamo, which builds fake tensors from this one, gets the wrapper's own (empty) storage."""
        if torch.compiler.is_compiling():
            return torch.Tensor.untyped_storage(self)
        return self._elem.untyped_storage()

    def data_ptr(self) -> int:
        """The buffer's address, distinct per storage as a device pointer is: accelerate keys tied
        parameters by it, and the wrapper's own (0, as a meta tensor's) mixed them up."""
        if torch.compiler.is_compiling():
            return torch.Tensor.data_ptr(self)
        return self._elem.data_ptr()

    def __tensor_flatten__(self):
        return ["_elem"], self.device

    @staticmethod
    def __tensor_unflatten__(inner_tensors, meta, outer_size, outer_stride):
        return NeuronTensor(inner_tensors["_elem"], device=meta)

    def __repr__(self, *, tensor_contents=None):
        elem = self._elem
        if isinstance(elem, torch._subclasses.FakeTensor) or elem.is_meta:
            # While torch.compile traces, the buffer is a fake tensor: there are no values to show
            # (formatting would run data-dependent ops such as masked_select on it).
            return (f"NeuronTensor(shape={tuple(self.shape)}, dtype={self.dtype}, "
                    f"buffer={type(elem).__name__})")
        contents = torch._tensor_str._tensor_str(elem.detach(), len("tensor("))
        text = torch._tensor_str._str(self, tensor_contents=contents)  # PyTorch names the subclass
        return "tensor(" + text.removeprefix("NeuronTensor(")  # as CUDA tensors print

    def __format__(self, spec):
        if self.dim() == 0:
            return self._elem.item().__format__(spec)
        return object.__format__(self, spec)

    def tolist(self):
        return self._elem.tolist()

    def numpy(self, *, force: bool = False):
        raise TypeError("can't convert neuron:0 tensor to numpy; call .cpu() first (as on any device)")

    def __dlpack__(self, *args, **kwargs):
        """DLPack hands out device memory, which an emulated device does not have: refused (else
        the capsule held the CPU buffer under a neuron device and data pointer 0)."""
        raise UnsupportedError("DLPack export of a neuron tensor: the emulated device has no memory to "
                               "hand out", what="__dlpack__", hint="call .cpu() first, then export")

    def __dlpack_device__(self):
        self.__dlpack__()

    def __reduce_ex__(self, protocol):
        # The rebuild function is on torch.load's weights-only allow list (XLA and MTIA save this way).
        args = (self._elem.detach().clone(), self.dtype, str(self.device), self.requires_grad)
        return torch._utils._rebuild_device_tensor_from_cpu_tensor, args


def unwrap(value, op, allow_cpu: bool = False):
    """The emulator's view of one op argument; plain CPU tensors above 0-dim are refused."""
    kind = type(value)
    if kind is NeuronTensor:
        return value._elem
    if kind is list or kind is tuple:
        return [unwrap(v, op, allow_cpu) for v in value]
    if isinstance(value, torch.Tensor):
        if isinstance(value, NeuronTensor):
            return value._elem
        if value.device.type != "cpu":
            # Only while tracing (Dynamo/AOTAutograd): a factory made a plain fake tensor on neuron.
            return value.to(CPU)
        if value.dim() != 0 and not allow_cpu:
            raise DeviceMismatchError(op, value)
    elif kind is torch.device and value.type == "neuron":
        return CPU
    return value


def is_sequence_lengths(value) -> bool:
    """A 1-D int64 tensor: the lengths / batch_sizes of a packed sequence, which PyTorch keeps on CPU."""
    return isinstance(value, torch.Tensor) and value.dtype == torch.int64 and value.dim() == 1


def unwrap_args(args, op) -> list:
    return [unwrap(a, op) for a in args]


def unwrap_kwargs(kwargs, op) -> dict:
    return {k: unwrap(v, op) for k, v in kwargs.items()} if kwargs else kwargs


def wrap(value, device: torch.device | None = None):
    """Results of an op on the emulator's buffers, as neuron tensors on `device` (default: the
    current one; lists and tuples kept)."""
    if isinstance(value, torch.Tensor):
        return NeuronTensor(value, device=device)
    kind = type(value)
    if kind is list or kind is tuple:
        return kind(wrap(v, device) for v in value)
    return value


def device_of(args) -> torch.device | None:
    """The device of the first neuron tensor among `args` (lists included), where results go."""
    for value in args:
        if type(value) is NeuronTensor:
            return value._device
        if (type(value) is list or type(value) is tuple) and value and type(value[0]) is NeuronTensor:
            return value[0]._device
    return None


def to_neuron(cpu_tensor: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """A neuron tensor over a CPU tensor's memory (no copy), on `device` (default: the current one)."""
    from trnsim.torch import native

    if native.selected():
        core = native.load()
        return core.neuron_view(cpu_tensor, core.current_device() if device is None else device.index)
    return NeuronTensor(cpu_tensor, device=device)


def is_neuron(value) -> bool:
    """Whether `value` is a tensor on a neuron device (of either core)."""
    return isinstance(value, torch.Tensor) and value.device.type == NAME


def buffer_of(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU buffer behind a neuron tensor (a CPU tensor is returned as it is)."""
    if isinstance(tensor, NeuronTensor):
        return tensor._elem
    if tensor.device.type == NAME and type(tensor) in (torch.Tensor, torch.nn.Parameter):
        # a tensor of the C++ core (trnsim.torch.native); fake ones (torch.compile) have no memory
        from trnsim.torch import native

        return native.load().cpu_view(tensor)
    return tensor
