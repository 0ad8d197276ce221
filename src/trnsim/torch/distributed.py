"""torch.distributed on neuron: the `neuron` process-group backend, and defaults (the backend
of `init_process_group()`, FSDP2's mesh) that leave CPU scripts as they were.

`init_process_group("neuron")` moves data through gloo, which spans processes and machines under
torchrun. Collectives on neuron tensors reach the device as c10d ops, which run CPU's kernel on CPU
views of the tensors' memory (trnsim.torch.device), so one gloo backend serves both devices and
results are bitwise those of the same script on CPU with gloo. The profiler charges each collective's time
from `trnsim.system.collective_time` on the emulated instance (`machine()`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
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


_FSDP = "torch.distributed.fsdp._fully_shard._fully_shard"
"""The module of FSDP2's `fully_shard`; the modules that export it import it from there."""


def _default_mesh_where_the_model_is(fully_shard):
    """FSDP2 builds the mesh of `fully_shard(module)` without `mesh=` on the current accelerator,
    which trnsim makes neuron, and moves the module there: a CPU script's model would move to
    neuron. Without `mesh=`, the mesh is built where the module's parameters are: on neuron for
    a neuron model, on CPU otherwise, as PyTorch without trnsim does."""
    @functools.wraps(fully_shard)
    def shard(module, *args, mesh=None, **kwargs):
        if mesh is None and torch._C._get_accelerator().type == NAME:
            if not dist.is_initialized():
                dist.init_process_group()
            modules = module if isinstance(module, list | tuple) else [module]
            on_neuron = any(p.device.type == NAME for m in modules for p in m.parameters())
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(NAME if on_neuron else "cpu", mesh_shape=(dist.get_world_size(),))
        return fully_shard(module, *args, mesh=mesh, **kwargs)
    return shard


def register() -> None:
    """Register the `neuron` backend and the default-backend and FSDP2-mesh choices (idempotent)."""
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create_backend, devices=[NAME, "cpu"])
    dist.distributed_c10d.BackendConfig = _DefaultBackendConfig
    if _FSDP in sys.modules:
        original = sys.modules[_FSDP].fully_shard
        for name, module in list(sys.modules.items()):  # replaced wherever it is held
            if name.startswith("torch.distributed.") and getattr(module, "fully_shard", None) is original:
                module.fully_shard = _default_mesh_where_the_model_is(original)
    else:  # importing FSDP costs about a second: wait until the script does
        sys.meta_path.insert(0, _ShardWhenImported())


class _ShardWhenImported(importlib.abc.MetaPathFinder):
    """Replaces `fully_shard` as FSDP2's module is first imported, before any module exports it."""

    def find_spec(self, name, path, target=None):
        if name != _FSDP:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.fully_shard = _default_mesh_where_the_model_is(module.fully_shard)

        spec.loader.exec_module = exec_module
        return spec
