"""Registration of `neuron` as a PyTorch device (PrivateUse1, renamed), and the `torch.neuron` module.

PyTorch 2.13 lets a pure-Python backend supply the device guard and hooks
(`torch.utils.backend_registration._setup_privateuseone_for_python_backend`, experimental). Ops on
NeuronTensor reach Python through `__torch_dispatch__`; only calls that never see a neuron tensor
(factories such as `torch.zeros(..., device="neuron")`, and `_copy_from` inside `torch.tensor`)
arrive on the PrivateUse1 key, so they get kernels here. Each private API used has a smoke test in
tests/torch/test_torch_private_api.py.
"""

from __future__ import annotations

import contextlib
import gc
import types

import torch
from torch.utils.data._utils import collate

from trnsim.errors import UnsupportedError
from trnsim.torch import accelerator, attention, autocast, inductor, loading, precision, rnn, tensor
from trnsim.torch.tensor import CPU, NAME, NeuronTensor, device_of, unwrap, unwrap_args, unwrap_kwargs, wrap


class Stream(torch.Stream):
    """The emulator runs every op to completion at once, so one stream stands for all of them."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        return super().__new__(cls, device=NAME, priority=priority)

    def record_event(self, event=None):
        """A neuron Event (PyTorch's own asks the backend to synchronize it, which a Python device
        cannot: FSDP2's pinned CPU offload stopped there)."""
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
    mod = types.ModuleType("torch.neuron", "The trnsim neuron devices (emulated logical NeuronCores).")
    members = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_is_in_bad_fork": lambda: False,
        "device_count": device_count,
        "current_device": lambda: tensor.CURRENT[0].index,
        "set_device": set_device,
        "synchronize": lambda device=None: None,
        # The emulator's random numbers come from the CPU generator, so runs match CPU runs.
        "manual_seed": _manual_seed,
        "manual_seed_all": _manual_seed,
        "seed": lambda: torch.default_generator.seed(),
        "initial_seed": lambda: torch.default_generator.initial_seed(),
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
        "get_amp_supported_dtype": lambda: [torch.bfloat16, torch.float16],
        "memory_allocated": memory_allocated,
        "memory_reserved": memory_allocated,  # no caching allocator: reserved is what is allocated
        "empty_cache": lambda: None,
        "mem_get_info": mem_get_info,
        "get_device_name": get_device_name,
        "is_bf16_supported": lambda including_emulation=True: True,
        **{name: accelerator.no_history(f"torch.neuron.{name}") for name in accelerator.NO_HISTORY},
        "device": _DeviceContext,
        "_utils": types.SimpleNamespace(_get_device_index=_storage_index),
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

    check_index(device if device is not None else tensor.CURRENT[0])
    chip = distributed.machine().fabric.system.chip.name
    return f"trnsim-emulated {chip} logical NeuronCore ({distributed.instance()})"


class _DeviceContext(contextlib.AbstractContextManager):
    """`torch.neuron.device(index)`: the current device inside the block."""

    def __init__(self, device=None):
        self.device = None if device is None else check_index(device)

    def __enter__(self):
        self.previous = tensor.CURRENT[0]
        if self.device is not None:
            tensor.CURRENT[0] = self.device
        return self

    def __exit__(self, *exc) -> None:
        tensor.CURRENT[0] = self.previous


def _storage_index(location, optional: bool = False) -> int:
    """torch.load asks this before it builds storages on neuron, which cannot exist (a Python
    backend has no allocator). A string or torch.device `map_location` never gets here
    (loading.py moves the tensors after a CPU load); a dict or callable one is refused with the
    way out instead of crashing in C++."""
    raise UnsupportedError(f"torch.load with a map_location that maps storages to {str(location)!r} "
                           "needs storages on the neuron device, which trnsim cannot allocate",
                           what="map_location=neuron",
                           hint="pass map_location='neuron' (a string or torch.device), or load with "
                                "map_location='cpu' and move with .to('neuron') or load_state_dict")


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
    index = device if isinstance(device, int) else torch.device(device).index
    if index is None:
        return tensor.CURRENT[0]
    if index < 0:  # PyTorch keeps a device index in 8 bits: neuron:999 arrives as neuron:-25
        raise UnsupportedError(f"neuron:{index} does not exist (an index of 128 or more wraps around in "
                               f"PyTorch); the emulated node has {device_count()} neuron devices",
                               what=f"neuron:{index}", hint="use an index below torch.neuron.device_count()")
    if index >= device_count():
        raise UnsupportedError(f"neuron:{index} does not exist: the emulated node has {device_count()} "
                               "neuron devices", what=f"neuron:{index}",
                               hint="use an index below torch.neuron.device_count() (TRNSIM_TARGET and "
                                    "NEURON_LOGICAL_NC_CONFIG choose the node)")
    return torch.device("privateuseone", index)


def placement(device) -> torch.device:
    """Where a tensor asked for on `device` goes. Index 0 means the current device: PyTorch's
    Python-backend device guard always reports device 0 as current, so `.to("neuron")` arrives as
    neuron:0 even after `set_device(k)` (a process drives one device, as a torchrun rank does)."""
    resolved = check_index(device)
    return tensor.CURRENT[0] if resolved.index == 0 else resolved


def memory_allocated(device=None) -> int:
    """Bytes held by the distinct buffers of the live neuron tensors on `device` (default: the
    current one). Found by walking the garbage collector's objects when asked: no cost per op."""
    index = check_index(device if device is not None else tensor.CURRENT[0]).index
    buffers = {}
    for value in gc.get_objects():
        if type(value) is NeuronTensor and value.device.index == index and type(value._elem) is torch.Tensor:
            storage = value._elem.untyped_storage()
            buffers[storage.data_ptr()] = storage.nbytes()
    return sum(buffers.values())


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of one device: its share of the chip's HBM (the chip's HBM over the
    logical cores on it), less `memory_allocated`."""
    from trnsim.torch import distributed

    node = distributed.machine()
    total = node.fabric.system.chip.hbm_bytes // node.ranks_per_chip
    return total - memory_allocated(device), total


def set_device(device) -> None:
    """`torch.neuron.set_device`: factories and `.to("neuron")` without an index land here."""
    tensor.CURRENT[0] = check_index(device)


def _factory(op):
    """A PrivateUse1 kernel for a factory: build the values on CPU, hand them to a NeuronTensor."""
    make = _MATERIALISED.get(op, op)

    def kernel(*args, **kwargs):
        device = placement(kwargs["device"]) if kwargs.get("device") is not None else None
        kwargs["device"] = CPU
        return NeuronTensor(make(*args, **kwargs), device=device)

    return kernel


_MATERIALISED = {torch.ops.aten._efficientzerotensor.default: torch.ops.aten.zeros.default}
"""Factories whose CPU result holds no data (the ZeroTensor forward-mode AD makes for a missing
tangent), made as the tensor they stand for: a NeuronTensor needs a buffer (it crashed)."""


def _stacked(batch, *, collate_fn_map=None):
    return torch.stack(batch, 0)


def _copy_from(src, dst, non_blocking=False):
    """`torch.tensor(data, device="neuron")` lands here: copy into the new tensor's buffer."""
    op = torch.ops.aten._copy_from.default
    dst_buffer, src_buffer = unwrap(dst, op, allow_cpu=True), unwrap(src, op, allow_cpu=True)
    if precision.rounds_stochastically(src_buffer.dtype, dst_buffer.dtype):
        src_buffer = precision.round_to(src_buffer, dst_buffer.dtype)
    dst_buffer.copy_(src_buffer)
    return dst


_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def _pin_memory(cpu_tensor, device=None):
    """`pin_memory()` for neuron (DataLoader's default once neuron is the accelerator): the
    emulated device reads host memory as it is, so a plain copy; other devices pin as before."""
    target = torch.device(device).type if device is not None else torch._C._get_accelerator().type
    if target == NAME:
        return cpu_tensor.clone()
    return torch.ops.aten._pin_memory.default.redispatch(_COMPOSITE, cpu_tensor, device)


def _on_buffers(op):
    """A PrivateUse1 kernel that runs `op` on the buffers (reached only with the Python key off)."""

    def kernel(*args, **kwargs):
        return wrap(op(*unwrap_args(args, op), **unwrap_kwargs(kwargs, op)), device_of(args))

    return kernel


RUN_WHOLE = frozenset({"linalg_matrix_rank"})
"""Composite ops whose out= overloads never write `out` for a tensor subclass: matrix_rank's C++
code rebinds its `result` reference to a new tensor when the input is a subclass, so the caller's
out tensor kept its old values. A PrivateUse1 kernel for each out= overload stops the decomposition
above the Python key, and the op table runs the op whole on the buffers, where CPU's code writes out."""


def run_whole_out_overloads() -> list[str]:
    """The out= overloads of the `RUN_WHOLE` ops, as torch.library names them."""
    return [f"{name}.{overload}" for name in sorted(RUN_WHOLE)
            for overload in getattr(torch.ops.aten, name).overloads()
            if getattr(getattr(torch.ops.aten, name), overload)._schema.is_mutable]


def composite_ops_with_cpu_kernels(composites=("CompositeImplicitAutograd",)) -> list[str]:
    """Ops CPU runs with a kernel of its own but other devices run through one of `composites`
    (e.g. silu_backward, which they decompose).

    Registering any PrivateUse1 kernel for them stops the decomposition above the Python key, so
    __torch_dispatch__ sees the op itself and runs CPU's kernel: results stay bitwise equal.
    """
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return sorted(name.removeprefix("aten::") for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("aten::") and has_kernel(name, "CPU")
                  and any(has_kernel(name, key) for key in composites))


def factory_overloads() -> list:
    """Every aten overload that takes a `device` and no tensor: only these bypass __torch_dispatch__."""
    found = []
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, name = qualified.partition("::")
        packet_name, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, packet_name, None) if namespace == "aten" else None
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is None:
            continue
        arguments = op._schema.arguments
        if any(a.name == "device" for a in arguments) and not any("Tensor" in str(a.type) for a in arguments):
            found.append(op)
    return found


def register() -> list:
    """Make `neuron` a device. Returns the torch.library objects, which must be kept alive."""
    # The emulator's own Python runs eagerly: Dynamo must not trace into it (a compiled function
    # that calls a factory after a graph break would trace NeuronTensor.__new__). Skipping the
    # package's files costs nothing per op, unlike a torch.compiler.disable wrapper (~3 us a call).
    torch._dynamo.trace_rules.add("trnsim.torch")
    torch.utils.backend_registration._setup_privateuseone_for_python_backend(NAME, backend_module=_module())
    kernels = torch.library.Library("aten", "IMPL")
    for op in factory_overloads():
        kernels.impl(op._schema.name + (f".{op._overloadname}" if op._overloadname != "default" else ""),
                     _factory(op), "PrivateUse1")
    kernels.impl("_copy_from", _copy_from, "PrivateUse1")
    # torch.tensor([loss1, loss2]) reads each 0-d tensor's value below the Python key
    kernels.impl("_local_scalar_dense", lambda value: tensor.buffer_of(value).item(), "PrivateUse1")
    for name in composite_ops_with_cpu_kernels() + run_whole_out_overloads():
        packet, _, overload = name.partition(".")
        kernels.impl(name, _on_buffers(getattr(getattr(torch.ops.aten, packet), overload or "default")),
                     "PrivateUse1")
    kernels.impl("_pin_memory", _pin_memory, "CPU")
    # A DataLoader worker collates a batch into shared memory made on the batch's device, which
    # neuron tensors cannot have (the worker crashed): neuron batches are stacked as they are.
    collate.default_collate_fn_map[NeuronTensor] = _stacked
    attention.register(kernels)
    rnn.register(kernels)
    loading.install()
    inductor.install()
    accelerator.install()
    # Autocast: every op falls through unless trnsim.torch.autocast gives it a casting kernel.
    autocast_fallthrough = torch.library.Library("_", "IMPL")
    autocast_fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    autocast.register(kernels)
    # Backward of device tensors would run on an autograd worker thread, where context variables
    # (strict mode, the active profile) are not set; keep it on the calling thread, as CPU does.
    # This is per-thread: it covers the thread that registered the device (normally the main one).
    torch.autograd.set_multithreading_enabled(False)
    return [kernels, autocast_fallthrough]
