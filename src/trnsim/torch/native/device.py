"""`neuron` registered on the C++ core (TRNSIM_TORCH_NATIVE=1): real tensors, CPU's kernels.

The core runs every op with CPU's kernel on the tensors' memory; what Python adds here is what
makes results equal CPU's where PyTorch would otherwise treat a PrivateUse1 device differently
from CPU (CPU's kernel for ops that also have a composite one, collectives on CPU views, CPU's
attention, dropout and for-loop optimizer default), and the handlers the core calls for device
mismatches, fallbacks and the profiler. Not yet carried over from the Python device
(docs/torch.md, "Speed"): stochastic rounding and torch.compile.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import types

import torch

from trnsim.torch import accelerator, attention, autocast, fallback, inductor, native, ops, precision, profiler, rnn
from trnsim.torch import device as python_device
from trnsim.errors import UnsupportedError
from trnsim.torch.errors import DeviceMismatchError
from trnsim.torch.tensor import NAME, buffer_of, to_neuron

BRANCHING_ON_DEVICE = ["convolution", "_convolution", "convolution_backward"]
"""Composite ops whose C++ code picks a kernel by device type (a PrivateUse1 convolution goes to
`convolution_overrideable`): run whole with CPU's kernel on neuron, they pick CPU's."""


COMPOSITES = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
              "CompositeExplicitAutogradNonFunctional")
"""Kernels every backend without one of its own runs. The last builds a structured op (add, mm)
from its shape function and its out= kernel: whole on CPU instead, the op is one call, and a CPU
tensor CUDA would refuse meets the core's device check rather than the shape function's."""


def ops_run_whole_on_cpu() -> list[str]:
    """Ops with a CPU kernel of their own besides a composite one every other device would run
    (silu_backward, add, ...), and BRANCHING_ON_DEVICE: on neuron they get CPU's kernel."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return sorted({name for name in python_device.composite_ops_with_cpu_kernels(COMPOSITES)
                   if not has_kernel(f"aten::{name}", "PrivateUse1")} | set(BRANCHING_ON_DEVICE))


def collective_ops() -> list[str]:
    """c10d's collectives. Their PrivateUse1 kernels hand neuron tensors to the process group's
    backend, which gloo refuses; run as on CPU, gloo gets CPU views of the same memory, and the
    profiler sees each one."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return sorted(name.removeprefix("c10d::") for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("c10d::") and has_kernel(name, "CPU"))


def _cpu_optimizer_default() -> None:
    """Optimizers default to their per-parameter loop on neuron, as on CPU: a device in PyTorch's
    foreach list gets the multi-tensor path, whose arithmetic differs in the last bits."""
    optimizer = importlib.import_module("torch.optim.optimizer")
    supported = optimizer._get_foreach_kernels_supported_devices
    if getattr(supported, "_trnsim_original", None) is None:
        def without_neuron():
            return [name for name in supported() if name != NAME]
        without_neuron._trnsim_original = supported
        optimizer._get_foreach_kernels_supported_devices = without_neuron


def cpu_dropout(input, p: float, train: bool):
    """`dropout` as CPU computes it: a PrivateUse1 input would take the fused `native_dropout`,
    which scales after masking and so rounds differently."""
    if p == 0 or not train or input.numel() == 0:
        return input
    if p == 1:
        return input * torch.zeros((), dtype=input.dtype, device=input.device)
    noise = torch.empty_like(input).bernoulli_(1 - p)
    noise.div_(1 - p)
    return input * noise


def integer_histc(input, bins: int = 100, min=0, max=0, *, out=None):
    """`histc`, which CUDA computes for integer tensors and CPU refuses (trnsim.torch.ops.histc)."""
    counts = ops.histc(torch.ops.aten.histc.default, (buffer_of(input), bins, min, max), {})
    if out is None:
        return to_neuron(counts, input.device)
    return out.resize_(counts.shape).copy_(counts)


def _share_between_processes() -> None:
    """Neuron tensors sent to another process (a DataLoader worker's batch) travel as CPU tensors in
    shared memory and arrive on the same device; PyTorch's own path is CUDA's IPC, which hung."""
    from multiprocessing import reduction

    from torch.multiprocessing import reductions

    def reduce(tensor):
        if tensor.device.type != NAME:
            return reductions.reduce_tensor(tensor)
        return _rebuild_on_device, (tensor.detach().cpu(), tensor.device.index, tensor.requires_grad)

    for kind in (torch.Tensor, torch.nn.Parameter):
        reduction.register(kind, reduce)


def _rebuild_on_device(values: torch.Tensor, index: int, requires_grad: bool) -> torch.Tensor:
    return values.to(torch.device(NAME, index)).requires_grad_(requires_grad)


def _refuse_dlpack() -> None:
    """DLPack hands out device memory, which an emulated device does not have: refused by name
    (PyTorch's own message was a raw ValueError)."""
    for name in ("__dlpack__", "__dlpack_device__"):
        original = getattr(torch.Tensor, name)
        if getattr(original, "_trnsim_original", None) is not None:
            continue

        def export(self, *args, _original=original, **kwargs):
            if self.device.type == NAME:
                raise UnsupportedError("DLPack export of a neuron tensor: the emulated device has no "
                                       "memory to hand out", what="__dlpack__",
                                       hint="call .cpu() first, then export")
            return _original(self, *args, **kwargs)

        export._trnsim_original = original
        setattr(torch.Tensor, name, export)


def _note_fallback(name: str, overload: str) -> None:
    """Called by the core for an op outside the op table (ops.FAMILIES): counted, or refused."""
    fallback.note(f"{name.replace('::', '.')}.{overload or 'default'}", stacklevel=2)


def _refuse_cuda_only(op):
    def refuse(*args, **kwargs):
        ops.cuda_only(op, args, kwargs)
    return refuse


def _refuse_mismatch(name: str, overload: str, tensor) -> None:
    """Called by the core when an op mixes neuron tensors with a CPU tensor CUDA would refuse."""
    raise DeviceMismatchError(f"{name.replace('::', '.')}.{overload or 'default'}", tensor)


@functools.cache
def _overload(name: str, overload: str):
    namespace, _, packet = name.partition("::")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")


def _record(name: str, overload: str, args: tuple, outputs: tuple) -> None:
    """Called by the core for each op it runs while a profile is open."""
    active = profiler.current()
    if active is not None:
        active.record(_overload(name, overload), args, outputs[0] if len(outputs) == 1 else outputs)


@contextlib.contextmanager
def _device_context(device=None):
    core = native.load()
    previous = core.current_device()
    if device is not None:
        core.set_device(python_device.check_index(device).index)
    try:
        yield
    finally:
        core.set_device(previous)


def _module():
    """`torch.neuron`, with the current device and memory figures kept by the core."""
    from trnsim.torch import distributed

    core = native.load()
    module = python_device._module()
    members = {
        "current_device": core.current_device,
        "set_device": lambda device: core.set_device(python_device.check_index(device).index),
        "device": _device_context,
        "memory_allocated": lambda device=None: core.memory_allocated(_index(device)),
        "memory_reserved": lambda device=None: core.memory_allocated(_index(device)),
        "max_memory_allocated": lambda device=None: core.max_memory_allocated(_index(device)),
        "max_memory_reserved": lambda device=None: core.max_memory_allocated(_index(device)),
        "reset_peak_memory_stats": lambda device=None: core.reset_peak_memory(_index(device)),
        "mem_get_info": lambda device=None: _memory_info(_index(device), distributed.machine()),
        # torch.load asks this before it makes storages on the device, which the core can
        "_utils": types.SimpleNamespace(_get_device_index=torch._utils._get_device_index),
    }
    for name, value in members.items():
        setattr(module, name, value)
    return module


def _index(device) -> int:
    return native.load().current_device() if device is None else python_device.check_index(device).index


def _memory_info(index: int, node) -> tuple[int, int]:
    total = node.fabric.system.chip.hbm_bytes // node.ranks_per_chip
    return total - native.load().memory_allocated(index), total


def register() -> list:
    """Make `neuron` a device on the C++ core. Returns the torch.library objects to keep alive."""
    from trnsim.torch import distributed

    core = native.load()
    core.set_device_count(distributed.machine().ranks_per_node)
    torch._dynamo.trace_rules.add("trnsim.torch")
    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, _module())
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    core.run_on_cpu_for("aten", ops_run_whole_on_cpu())
    core.run_on_cpu_for("c10d", collective_ops())
    # Functional collectives (DTensor's) are composites of c10d's, which the profiler sees; their
    # wait would reach no device kernel.
    core.run_composite_for("_c10d_functional", ["wait_tensor"])
    core.set_mismatch_handler(_refuse_mismatch)
    core.set_index_handler(python_device.check_index)  # raises UnsupportedError for a missing index
    core.set_recorder(_record)
    core.set_rounding_handler(precision.stochastically_rounded)
    core.set_fallback_handler([f"aten::{name}" for name in ops.FAMILIES], _note_fallback)
    core.set_fp32_accumulate([f"aten::{name}" for name in ops.FP32_ACCUMULATE])
    _cpu_optimizer_default()
    _share_between_processes()
    _refuse_dlpack()
    kernels = torch.library.Library("aten", "IMPL")
    attention.register(kernels)
    for key in ("AutogradPrivateUse1", "PrivateUse1"):
        rnn.register(kernels, key)
    # With autograd off (inference_mode) these composites reach the device key, not the autograd one.
    kernels.impl("scaled_dot_product_attention", attention.scaled_dot_product_attention, "PrivateUse1")
    for key in ("AutogradPrivateUse1", "PrivateUse1"):
        kernels.impl("dropout", cpu_dropout, key)
    kernels.impl("histc", integer_histc, "PrivateUse1")
    kernels.impl("histc.out", integer_histc, "PrivateUse1")
    for name in ops.CUDA_ONLY:
        kernels.impl(name, _refuse_cuda_only(getattr(torch.ops.aten, name).default), "PrivateUse1")
    autocast.register(kernels)
    accelerator.install()
    inductor.install()
    torch.autograd.set_multithreading_enabled(False)
    return [kernels]
