"""torch.distributed on neuron: the `neuron` process-group backend, and defaults (the backend
of `init_process_group()`, FSDP2's mesh) that leave CPU scripts as they were.

`init_process_group("neuron")` moves data through gloo, which spans processes and machines under
torchrun. Collectives on neuron tensors reach `NeuronTensor.__torch_dispatch__` as c10d ops, which
run them on the tensors' CPU buffers, so one gloo backend serves both devices and results are
bitwise those of the same script on CPU with gloo. The profiler charges each collective's time
from `trnsim.system.collective_time` on the emulated instance (`machine()`).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from trnsim import config
from trnsim.errors import ConfigError

NAME = "neuron"


def instance() -> str:
    """The instance the emulated node is: the largest priced one of TRNSIM_TARGET's chip (trn2 by
    default), else the target's own system (trn3 has no priced instance yet)."""
    from trnsim.torch import profiler

    return _instance(config.current().target or profiler.DEFAULT_TARGET)


@functools.lru_cache(maxsize=8)
def _instance(target: str) -> str:
    from trnsim.torch import profiler

    spec = profiler.default_instance(target)
    return spec.name if spec is not None else target


def machine():
    """The emulated node as `trnsim.system.Machine`: one rank per logical core, the LNC read from
    NEURON_LOGICAL_NC_CONFIG as the Neuron runtime does (default: the system's, 2 on trn2)."""
    return _machine(instance(), os.environ.get("NEURON_LOGICAL_NC_CONFIG", ""))


@functools.lru_cache(maxsize=8)
def _machine(name: str, lnc: str):
    from trnsim import system

    if lnc not in ("", "1", "2"):
        raise ConfigError(f"NEURON_LOGICAL_NC_CONFIG={lnc!r} is not a logical-core size", hint="use 1 or 2")
    return system.Machine.of(name, lnc=int(lnc) if lnc else None)


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    """The backend behind `init_process_group("neuron")`: gloo, for neuron and CPU tensors alike."""
    return dist.ProcessGroupGloo(store, rank, size, timeout)


class _DefaultBackendConfig(dist.distributed_c10d.BackendConfig):
    """`init_process_group()` with no backend: gloo for CPU tensors as without trnsim, and for
    neuron tensors too (PyTorch would map only the current accelerator, leaving CPU tensors none)."""

    def __init__(self, backend):
        if str(backend) == dist.Backend.UNDEFINED and torch._C._get_accelerator().type == NAME:
            backend = f"cpu:{dist.Backend.GLOO},{NAME}:{dist.Backend.GLOO}"
        super().__init__(backend)


_FSDP_INIT = "torch.distributed.fsdp._fully_shard._fsdp_init"
"""The module that builds FSDP2's default mesh (already loaded when the device registers); the
modules that use it imported it from there."""


def _cpu_unless_neuron(default_mesh):
    """FSDP2's default mesh (`fully_shard` without `mesh=`) is built on the current accelerator,
    which trnsim makes neuron: a CPU script's model would move to neuron. Build it on neuron only
    for a process group made with `init_process_group("neuron")`; otherwise on CPU, as PyTorch
    without trnsim does."""
    @functools.wraps(default_mesh)
    def init_default_mesh(mesh_dim_names=None):
        if not dist.is_initialized():
            dist.init_process_group()
        if torch._C._get_accelerator().type == NAME and dist.get_backend() != NAME:
            from torch.distributed.device_mesh import init_device_mesh

            return init_device_mesh("cpu", mesh_shape=(dist.get_world_size(),),
                                    mesh_dim_names=mesh_dim_names)
        return default_mesh(mesh_dim_names)
    return init_default_mesh


def register() -> None:
    """Register the `neuron` backend and the default-backend and FSDP2-mesh choices (idempotent)."""
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create_backend, devices=[NAME, "cpu"])
    dist.distributed_c10d.BackendConfig = _DefaultBackendConfig
    original = importlib.import_module(_FSDP_INIT)._init_default_mesh
    for name, module in list(sys.modules.items()):  # replaced wherever it is held
        if name.startswith("torch.distributed.") and getattr(module, "_init_default_mesh", None) is original:
            module._init_default_mesh = _cpu_unless_neuron(original)
