"""Running kernels: `jit`, `simulate`, `trace`, launch grids and LNC=2.

`simulate(kernel)(*arrays)` runs the kernel body as ordinary Python against a NeuronCore of the
target generation, with values, and returns results of the kind it was given (numpy, torch or
JAX). `trace(kernel, *arrays_or_specs)` runs it without values and returns the `Trace`. Both
keep the trace of the last run on the kernel (`kernel.last_trace`). The target comes from the
`target=` argument, else NEURON_PLATFORM_TARGET_OVERRIDE, else TRNSIM_TARGET, else trn3 (the
official simulator's default when no chip is detected).
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from math import prod

from trnsim import config, hardware
from trnsim.core import blas
from trnsim.core.machine import Launch, NeuronCore
from trnsim.core.trace import Trace
from trnsim.errors import ConfigError, KernelError
from trnsim.nki import backend, dtypes, interop
from trnsim.nki.tensor import NkiTensor

DEFAULT_TARGET = "trn3"
_TARGET_NAMES = {"trn1": "trn1", "gen2": "trn1", "inf2": "inf2", "trn2": "trn2", "gen3": "trn2",
                 "trn3": "trn3", "gen4": "trn3"}


def resolve_target(target: str | None = None) -> str:
    """The hardware target name for an explicit choice or the environment."""
    chosen = target or os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or config.current().target
    chosen = (chosen or DEFAULT_TARGET).strip().lower()
    try:
        return _TARGET_NAMES[chosen]
    except KeyError:
        raise ConfigError(f"unknown NKI target {chosen!r}",
                          hint=f"use one of {sorted(_TARGET_NAMES)}") from None


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of a kernel argument, for `trace` without real arrays."""

    shape: tuple[int, ...]
    dtype: str = "float32"


class Kernel:
    """A kernel function plus its launch grid. Calling it simulates it."""

    def __init__(self, fn, grid: tuple[int, ...] = (), options: dict | None = None):
        self.fn = fn
        self.grid = grid
        self.options = dict(options or {})
        self.last_trace: Trace | None = None
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid) -> Kernel:
        grid = grid if isinstance(grid, tuple) else (grid,)
        return Kernel(self.fn, tuple(int(getattr(g, "size", g)) for g in grid), self.options)

    def __call__(self, *args, target: str | None = None, **kwargs):
        return run(self, args, kwargs, target=target, with_values=True)

    def with_schedule(self, schedule) -> Kernel:
        """Scheduling hints do not change values; recorded for the timing model."""
        return Kernel(self.fn, self.grid, {**self.options, "schedule": tuple(schedule)})


def jit(fn=None, **options):
    """`@nki.jit` / `@nki.jit(...)`: wrap a kernel function."""
    for removed in ("platform_target", "mode"):
        if removed in options:
            raise ConfigError(f"nki.jit({removed}=...) was removed in NKI 0.3.0",
                              hint="set NEURON_PLATFORM_TARGET_OVERRIDE or pass target= to simulate")
    if fn is None:
        return lambda f: Kernel(f, options=options)
    return fn if isinstance(fn, Kernel) else Kernel(fn, options=options)


def simulate(kernel, target: str | None = None):
    """A callable that runs the kernel with values (numpy/torch/JAX in, same kind out)."""
    kernel = jit(kernel)
    return functools.wraps(kernel.fn)(
        lambda *args, **kwargs: run(kernel, args, kwargs, target=target, with_values=True))


def trace(kernel, *args, target: str | None = None, **kwargs) -> Trace:
    """Run the kernel without values and return its instruction trace."""
    kernel = jit(kernel)
    run(kernel, args, kwargs, target=target, with_values=False)
    return kernel.last_trace


def run(kernel: Kernel, args, kwargs, *, target: str | None, with_values: bool):
    """Launch every program of the kernel's grid and convert the results back."""
    target = resolve_target(target)
    spec = hardware.core(target)
    programs = prod(kernel.grid) if kernel.grid else 1
    launch = Launch(target, programs if programs == 2 else 1)
    settings = config.current()
    # The two cores of an LNC=2 launch run as threads that share HBM: they execute eagerly, so no
    # thread ever runs another's deferred queue.
    eager = settings.eager or launch.barrier is not None
    cores = [NeuronCore(spec, launch, with_values=with_values, strict=settings.strict, program_id=p,
                        grid=kernel.grid, eager=eager) for p in range(programs)]
    token = backend.activate(cores[0])
    try:
        kind, hbm_args, hbm_kwargs = interop.to_hbm(args, kwargs, "shared_hbm" if programs > 1 else "hbm")
    finally:
        backend.deactivate(token)
    with blas.limited(1):
        results = _launch(kernel.fn, cores, hbm_args, hbm_kwargs)
    kernel.last_trace = launch.trace
    interop.write_back(args, hbm_args, launch.trace, with_values)
    result = results[0]
    _check_outputs(result, launch)
    return interop.from_hbm(result, kind, set(launch.created)) if with_values else result


def _launch(fn, cores, args, kwargs) -> list:
    results = [None] * len(cores)
    errors: list[BaseException] = []

    def program(index: int) -> None:
        token = backend.activate(cores[index])
        try:
            results[index] = fn(*args, **kwargs)
            cores[index].flush()
        except BaseException as error:  # re-raised in the caller's thread below
            errors.append(_first_error(cores[index], error))
            if cores[index].launch.barrier is not None:
                cores[index].launch.barrier.abort()
        finally:
            backend.deactivate(token)

    if len(cores) == 2:
        threads = [threading.Thread(target=program, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for index in range(len(cores)):
            program(index)
            if errors:
                break
    if errors:
        raise errors[0]
    return results


def _first_error(core: NeuronCore, error: BaseException) -> BaseException:
    """The error to report: an earlier deferred instruction's execution error, if there is one."""
    try:
        core.flush()
    except Exception as earlier:  # noqa: BLE001 - any execution error outranks the later one
        return earlier
    return error


def _check_outputs(result, launch: Launch) -> None:
    """Kernel outputs must live in shared HBM (NKI 0.3.0 and later)."""
    for tensor in interop.flatten(result):
        created = isinstance(tensor, NkiTensor) and tensor.storage.id in launch.created
        if created and dtypes.region_of(tensor.storage) is not dtypes.SHARED_HBM:
            where = launch.created[tensor.storage.id]
            raise KernelError(f"kernel output {tensor.name!r} is in {tensor.buffer!r}, not nl.shared_hbm",
                              where=where, op="return",
                              hint="allocate outputs with nl.ndarray(..., buffer=nl.shared_hbm)")
