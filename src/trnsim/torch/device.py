"""`neuron` registered as a PyTorch device on the C++ core (`trnsim.torch.native`), and the
`torch.neuron` module.

The core runs every op with CPU's kernel on the tensors' memory; what Python adds here is what
makes results equal CPU's where PyTorch would otherwise treat a PrivateUse1 device differently
from CPU (CPU's kernel for ops that also have a composite one, collectives on CPU views, CPU's
attention, dropout and for-loop optimizer default), the handlers the core calls for device
mismatches, fallbacks, stochastic rounding and the profiler, and the calls generic code makes on
`torch.neuron`. The private PyTorch APIs used are listed in docs/torch.md.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import types

import torch

from trnsim.errors import UnsupportedError
from trnsim.torch import (
    accelerator,
    attention,
    autocast,
    fallback,
    inductor,
    native,
    ops,
    precision,
    profiler,
    rnn,
)
from trnsim.torch.errors import DeviceMismatchError
from trnsim.torch.tensor import NAME, buffer_of, to_neuron


class Stream(torch.Stream):
    """The emulator runs every op to completion at once, so one stream stands for all of them."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        return super().__new__(cls, device=NAME, priority=priority)

    def record_event(self, event=None):
        """A neuron Event, done at once (FSDP2's pinned CPU offload records and waits on one)."""
        return event if event is not None else Event()

    def synchronize(self) -> None:
        """Nothing to wait for: every op has finished when it returns."""

    def query(self) -> bool:
        return True


class Event(torch.Event):
    """Events record nothing to wait for: work is finished when the op returns."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, device=NAME, enable_timing=enable_timing)

    def synchronize(self) -> None:
        """Nothing to wait for: every op has finished when it returns."""

    def elapsed_time(self, end_event) -> float:
        raise UnsupportedError("neuron events carry no timestamps", what="Event.elapsed_time",
                               hint="time device work with trnsim.torch.profile()")


def _module() -> types.ModuleType:
    """`torch.neuron`: the functions AMP, RNG, torch.accelerator and FSDP look up on a device."""
    core = native.load()
    mod = types.ModuleType("torch.neuron", "The trnsim neuron devices (emulated logical NeuronCores).")
    members = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_is_in_bad_fork": lambda: False,
        "device_count": device_count,
        "current_device": core.current_device,
        "set_device": lambda device: core.set_device(check_index(device).index),
        "device": _device_context,
        "synchronize": lambda device=None: None,
        # The device's default generator is CPU's, so runs match CPU runs.
        "manual_seed": _manual_seed,
        "manual_seed_all": _manual_seed,
        "seed": lambda: torch.default_generator.seed(),
        "initial_seed": lambda: torch.default_generator.initial_seed(),
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
        "get_amp_supported_dtype": lambda: [torch.bfloat16, torch.float16],
        # no caching allocator: reserved is what is allocated, and emptying the cache frees nothing
        "memory_allocated": lambda device=None: core.memory_allocated(_index(device)),
        "memory_reserved": lambda device=None: core.memory_allocated(_index(device)),
        "max_memory_allocated": lambda device=None: core.max_memory_allocated(_index(device)),
        "max_memory_reserved": lambda device=None: core.max_memory_allocated(_index(device)),
        "reset_peak_memory_stats": lambda device=None: core.reset_peak_memory(_index(device)),
        **{name: accelerator.no_history(f"torch.neuron.{name}") for name in accelerator.NO_HISTORY},
        "empty_cache": lambda: None,
        "mem_get_info": mem_get_info,
        "get_device_name": get_device_name,
        "is_bf16_supported": lambda including_emulation=True: True,
        # torch.load asks this before it makes storages on the device
        "_utils": types.SimpleNamespace(_get_device_index=torch._utils._get_device_index),
        "Stream": Stream,
        "Event": Event,
        "current_stream": lambda device=None: Stream(),
        "default_stream": lambda device=None: Stream(),
        "stream": lambda stream=None: contextlib.nullcontext(stream),
    }
    for name, value in members.items():
        setattr(mod, name, value)
    return mod


def get_device_name(device=None) -> str:
    """The device as `torch.cuda.get_device_name` would name it: the emulated chip and instance."""
    from trnsim.torch import distributed

    _index(device)
    chip = distributed.machine().fabric.system.chip.name
    return f"trnsim-emulated {chip} logical NeuronCore ({distributed.instance()})"


@contextlib.contextmanager
def _device_context(device=None):
    """`torch.neuron.device(index)`: the current device inside the block."""
    core = native.load()
    previous = core.current_device()
    if device is not None:
        core.set_device(check_index(device).index)
    try:
        yield
    finally:
        core.set_device(previous)


def _index(device) -> int:
    """The index of the neuron device `device` names (None: the current one)."""
    return check_index(device).index


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of one device: its share of the chip's HBM (the chip's HBM over the
    logical cores on it), less the memory its tensors hold."""
    from trnsim.torch import distributed

    node = distributed.machine()
    total = node.fabric.system.chip.hbm_bytes // node.ranks_per_chip
    return total - native.load().memory_allocated(_index(device)), total


def _manual_seed(seed: int) -> None:
    # torch.manual_seed calls this too, so it must not call torch.manual_seed back.
    torch.default_generator.manual_seed(int(seed))


def device_count() -> int:
    """Neuron devices per node, as Neuron shows them to torchrun ranks: the logical NeuronCores of
    the emulated instance (`trnsim.torch.distributed.machine()`)."""
    from trnsim.torch import distributed

    return distributed.machine().ranks_per_node


def check_index(device) -> torch.device:
    """The neuron device `device` names (an index, "neuron:1", a torch.device; no index = the
    current one); an index the node does not have is refused, not silently remapped."""
    index = device if isinstance(device, int) or device is None else torch.device(device).index
    if index is None:
        return torch.device(NAME, native.load().current_device())
    if index < 0:  # PyTorch keeps a device index in 8 bits: neuron:999 arrives as neuron:-25
        raise UnsupportedError(f"neuron:{index} does not exist (an index of 128 or more wraps around in "
                               f"PyTorch); the emulated node has {device_count()} neuron devices",
                               what=f"neuron:{index}", hint="use an index below torch.neuron.device_count()")
    if index >= device_count():
        raise UnsupportedError(f"neuron:{index} does not exist: the emulated node has {device_count()} "
                               "neuron devices", what=f"neuron:{index}",
                               hint="use an index below torch.neuron.device_count() (TRNSIM_TARGET and "
                                    "NEURON_LOGICAL_NC_CONFIG choose the node)")
    return torch.device(NAME, index)


BRANCHING_ON_DEVICE = ["convolution", "_convolution", "convolution_backward"]
"""Composite ops whose C++ code picks a kernel by device type (a PrivateUse1 convolution goes to
`convolution_overrideable`): run whole with CPU's kernel on neuron, they pick CPU's."""


COMPOSITES = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
              "CompositeExplicitAutogradNonFunctional")
"""Kernels every backend without one of its own runs. The last builds a structured op (add, mm)
from its shape function and its out= kernel: whole on CPU instead, the op is one call, and a CPU
tensor CUDA would refuse meets the core's device check rather than the shape function's."""


def ops_run_whole_on_cpu() -> list[str]:
    """Ops with a CPU kernel of their own besides one of COMPOSITES, which every other device would
    run (silu_backward, add, ...), and BRANCHING_ON_DEVICE: on neuron they get CPU's kernel, so
    results stay bitwise equal to CPU's."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return sorted({name.removeprefix("aten::") for name in torch._C._dispatch_get_all_op_names()
                   if name.startswith("aten::") and has_kernel(name, "CPU")
                   and any(has_kernel(name, key) for key in COMPOSITES)
                   and not has_kernel(name, "PrivateUse1")} | set(BRANCHING_ON_DEVICE))


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
    counts = ops.histc(buffer_of(input), bins, min, max)
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
    """DLPack labels memory with a device type it knows, and has none for an emulated device:
    refused by name (PyTorch's own message was a raw ValueError)."""
    for name in ("__dlpack__", "__dlpack_device__"):
        original = getattr(torch.Tensor, name)
        if getattr(original, "_trnsim_original", None) is not None:
            continue

        def export(self, *args, _original=original, **kwargs):
            if self.device.type == NAME:
                raise UnsupportedError("DLPack export of a neuron tensor: DLPack has no device type "
                                       "for an emulated device", what="__dlpack__",
                                       hint="call .cpu() first, then export")
            return _original(self, *args, **kwargs)

        export._trnsim_original = original
        setattr(torch.Tensor, name, export)


UNSUPPORTED_LAYOUTS = {"SparsePrivateUse1": "sparse COO", "SparseCsrPrivateUse1": "sparse compressed",
                       "NestedTensorPrivateUse1": "nested"}
"""Tensor kinds the device has no kernels for (dispatch key -> name): refused by name, where PyTorch
would raise its own "Could not run ... from the 'Sparseneuron' backend"."""


def _op_name(name: str, overload: str) -> str:
    """An op as the core names it ("aten::add", "Tensor") in trnsim's spelling: aten.add.Tensor."""
    return f"{name.replace('::', '.')}.{overload or 'default'}"


def _refuse_layout(what: str) -> None:
    raise UnsupportedError(f"{what}: the neuron device has strided tensors only", what=what,
                           hint="keep the tensor on CPU, or make it dense (.to_dense()) first")


def _refuse_layouts() -> torch.library.Library:
    library = torch.library.Library("_", "IMPL")
    for key, kind in UNSUPPORTED_LAYOUTS.items():
        def refuse(op, *_args, _kind=kind, **_kwargs):
            _refuse_layout(f"{op} on a {_kind} tensor")
        library.fallback(refuse, key)
    return library


def _refuse_made_layout(name: str, overload: str, layout: str) -> None:
    """Called by the core when an op's CPU kernel made a sparse (non-strided) tensor from neuron ones."""
    _refuse_layout(f"{_op_name(name, overload)} making a tensor of layout {layout}")


def _note_fallback(name: str, overload: str) -> None:
    """Called by the core for an op outside the op table (ops.FAMILIES): counted, or refused."""
    fallback.note(_op_name(name, overload), stacklevel=2)


def _refuse_cuda_only(op):
    def refuse(*args, **kwargs):
        ops.cuda_only(op, args, kwargs)
    return refuse


def _refuse_mismatch(name: str, overload: str, tensor, device: int) -> None:
    """Called by the core when an op on neuron:`device` gets a tensor CUDA would refuse there."""
    raise DeviceMismatchError(_op_name(name, overload), tensor, on=torch.device(NAME, device))


@functools.cache
def _overload(name: str, overload: str):
    namespace, _, packet = name.partition("::")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")


def _record(name: str, overload: str, args: tuple, outputs: tuple) -> None:
    """Called by the core for each op it runs while a profile is open."""
    active = profiler.current()
    if active is not None:
        active.record(_overload(name, overload), args, outputs[0] if len(outputs) == 1 else outputs)


def _unavailable(error: UnsupportedError) -> list:
    """`neuron` where the core cannot be built: CPU code runs as before, and a neuron tensor is
    refused with the reason and the way out; `torch.neuron.is_available()` says False."""
    torch.utils.rename_privateuse1_backend(NAME)
    module = types.ModuleType("torch.neuron", "The trnsim neuron devices: not available here.")
    module.is_available = lambda: False
    module.device_count = lambda: 0
    torch._register_device_module(NAME, module)

    def refuse(*_args, **_kwargs):
        raise error

    refusal = torch.library.Library("_", "IMPL")
    refusal.fallback(refuse, "PrivateUse1")
    return [refusal]


def register() -> list:
    """Make `neuron` a device on the C++ core. Returns the torch.library objects to keep alive."""
    from trnsim.torch import distributed

    try:
        core = native.load()
    except UnsupportedError as error:
        return _unavailable(error)
    core.set_device_count(distributed.machine().ranks_per_node)
    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, _module())
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    core.run_on_cpu_for("aten", ops_run_whole_on_cpu())
    core.run_on_cpu_for("c10d", collective_ops())
    # Functional collectives (DTensor's) are composites of c10d's, which the profiler sees; their
    # wait would reach no device kernel.
    core.run_composite_for("_c10d_functional", ["wait_tensor"])
    core.set_mismatch_handler(_refuse_mismatch)
    core.set_index_handler(check_index)  # raises UnsupportedError for a missing index
    core.set_layout_handler(_refuse_made_layout)
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
    # Backward on the calling thread, as on CPU: context variables (strict mode, the active
    # profile) are per thread. This setting is per thread too (normally the main one).
    torch.autograd.set_multithreading_enabled(False)
    return [kernels, _refuse_layouts()]
