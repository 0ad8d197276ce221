"""Running kernels: `jit`, `simulate`, `trace`, launch grids and LNC=2.

`simulate(kernel)(*arrays)` runs the kernel body as ordinary Python against a NeuronCore of the
target generation, with values, and returns results of the kind it was given (numpy, torch or
JAX). `trace(kernel, *arrays_or_specs)` runs it without values and returns the `Trace`. Both
keep the trace of the last run on the kernel (`kernel.last_trace`). The target comes from the
`target=` argument, else NEURON_PLATFORM_TARGET_OVERRIDE, else TRNSIM_TARGET, else trn3 (the
official simulator's default when no chip is detected).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from math import prod

from trnsim import config, hardware
from trnsim.core.isa import Memory
from trnsim.core.machine import Launch, NeuronCore
from trnsim.core.runtime import current as current_runtime
from trnsim.core.trace import NKI_COMPILER, Trace
from trnsim.errors import (
    ArgumentError,
    ConfigError,
    KernelError,
    ShapeError,
    SourceLoc,
    TrnsimError,
    reported_error,
)
from trnsim.nki import backend, dtypes, interop, lnc, races
from trnsim.nki.tensor import NkiTensor

DEFAULT_TARGET = "trn3"
_TARGET_NAMES = {"trn1": "trn1", "gen2": "trn1", "inf2": "inf2", "trn2": "trn2", "gen3": "trn2",
                 "trn3": "trn3", "gen4": "trn3"}


MAX_PROGRAMS = 1 << 16
"""Most programs one launch grid may have. trnsim runs a grid's programs one after another, so a
grid far larger than any kernel uses (10^9 programs) would run for days instead of failing."""


def resolve_target(target: str | None = None) -> str:
    """The hardware target name for an explicit choice (None: the environment's, else trn3)."""
    if target is None:
        environment = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or config.current().target
        target = environment or DEFAULT_TARGET
    elif not isinstance(target, str):
        raise ConfigError(f"target={target!r} is not a target name", hint=_TARGET_HINT)
    try:
        return _TARGET_NAMES[target.strip().lower()]
    except KeyError:
        raise ConfigError(f"unknown NKI target {target!r}{_what_it_is(target)}", hint=_TARGET_HINT) from None


_TARGET_HINT = "use trn1, trn2 or trn3 (or inf2, gen2, gen3, gen4)"


def _what_it_is(name: str) -> str:
    """A pointer for a name that is not a target: the targets of a core name, or close matches."""
    try:
        core = hardware.core(name.strip())
    except TrnsimError:
        close = difflib.get_close_matches(name.strip().lower(), list(_TARGET_NAMES), n=2)
        return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    targets = hardware.targets_of(core)
    return f": {core.name} is a NeuronCore, the core of target {' and '.join(map(repr, targets))}"


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of a kernel argument, for `trace` without real arrays."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self):
        dims = tuple(self.shape) if isinstance(self.shape, tuple | list) else (self.shape,)
        if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in dims):
            caller = sys._getframe(2)  # the line that made the spec (frame 1 is dataclass's __init__)
            where = SourceLoc(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)
            raise ShapeError(f"TensorSpec shape {self.shape!r}: every dim must be an integer of at least 1",
                             where=where)
        object.__setattr__(self, "shape", tuple(int(d) for d in dims))


class Kernel:
    """A kernel function plus its launch grid. Calling it simulates it."""

    compiler = NKI_COMPILER  # what builds it on hardware: the timing model follows that compiler

    def __init__(self, fn, grid: tuple[int, ...] = (), options: dict | None = None):
        if any(test(fn) for test in (inspect.isgeneratorfunction, inspect.isasyncgenfunction,
                                     inspect.iscoroutinefunction)):
            raise KernelError(f"kernel {getattr(fn, '__name__', fn)!r} is a generator or coroutine function "
                              f"(its body has a yield or is async): calling it would run nothing",
                              where=_kernel_site(fn), hint="write the kernel as a plain function")
        self.fn = fn
        self.grid = grid
        self.options = dict(options or {})
        self.last_trace: Trace | None = None
        functools.update_wrapper(self, fn)
        code = getattr(inspect.unwrap(fn), "__code__", None)  # the user's function, not a wrapper
        if code is not None:  # its instructions' lines are found in its file (core/machine.py)
            current_runtime().add_kernel_file(code.co_filename)

    def __getitem__(self, grid) -> Kernel:
        return Kernel(self.fn, _launch_grid(grid if isinstance(grid, tuple) else (grid,)), self.options)

    def __call__(self, *args, target: str | None = None, **kwargs):
        if backend.in_kernel():  # NKI inlines every call, kernels too: the callee runs on the caller's cores
            return self.fn(*args, **kwargs)
        return run(self, args, kwargs, target=target, with_values=True)

    def with_schedule(self, schedule) -> Kernel:
        """Scheduling hints do not change values; recorded for the timing model."""
        return Kernel(self.fn, self.grid, {**self.options, "schedule": tuple(schedule)})


def _launch_grid(grid: tuple) -> tuple[int, ...]:
    """`kernel[...]`'s grid: whole numbers of programs, at least 1 each, MAX_PROGRAMS at most in all."""
    for size in grid:
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise KernelError(f"launch grid {list(grid)}: {size!r} is not a number of programs (a whole "
                              f"number of at least 1)", hint="launch with kernel[n] or kernel[nx, ny]")
    grid = tuple(int(size) for size in grid)
    if prod(grid) > MAX_PROGRAMS:
        raise KernelError(f"launch grid {list(grid)} has {prod(grid)} programs; trnsim runs at most "
                          f"{MAX_PROGRAMS} in one launch", hint="launch a smaller grid, or several")
    return grid


def _kernel_site(fn) -> SourceLoc | None:
    """The kernel's `def` line, for errors about the kernel as a whole."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name) if code else None


COMPILER_OPTIONS = frozenset({"debug_kernel", "show_compiler_tb", "experimental_flags",
                              "additional_compile_opt"})
"""nki.jit options of the NKI compiler that public kernels for NKI 0.6 pass (nki-library
core/qkv/qkv.py; nki-samples' attention_fwd_performance tutorial). trnsim has no compiler: ignored."""


def jit(fn=None, **options):
    """`@nki.jit` / `@nki.jit(...)`: wrap a kernel function.

    NKI 0.6 documents no jit options. Two old ones are handled as its 0.3.0 release notes say:
    `mode=` is deprecated and ignored (a DeprecationWarning here), `platform_target=` is an error.
    The COMPILER_OPTIONS published kernels pass are accepted and ignored: they steer compilation
    and debugging, never values. Any other option is an error, so a misspelt one is never lost."""
    if "mode" in options:
        _warn_mode(options.pop("mode"))
    unknown = [name for name in options if name not in COMPILER_OPTIONS]
    if unknown:
        raise _option_error(unknown[0], options[unknown[0]])
    if fn is None:
        return Kernel
    return fn if isinstance(fn, Kernel) else Kernel(fn)


def _warn_mode(mode) -> None:
    """The deprecation warning for `mode=`, at the decorator's line."""
    warnings.warn(f"nki.jit(mode={mode!r}): mode is deprecated and ignored since NKI 0.3.0 (the framework "
                  f"is detected from the arguments); remove it", DeprecationWarning, stacklevel=3)


def _option_error(name: str, value) -> ConfigError:
    """The refusal of a jit option, at the decorator's line, saying what to do instead."""
    where = SourceLoc.of_caller()
    if name == "platform_target":
        return ConfigError(f"nki.jit(platform_target={value!r}) is an error since NKI 0.3.0",
                           hint=f"remove it and set NEURON_PLATFORM_TARGET_OVERRIDE={value} (or pass "
                                f"target={value!r} to nki.simulate)", where=where)
    return ConfigError(f"nki.jit({name}=...) is not an option of nki.jit", where=where,
                       hint=f"remove it; trnsim knows {', '.join(sorted(COMPILER_OPTIONS))} (ignored)")


def simulate(kernel, target: str | None = None):
    """A callable that runs the kernel with values (numpy/torch/JAX in, same kind out)."""
    kernel = _as_kernel(kernel, "nki.simulate")
    return functools.wraps(kernel.fn)(
        lambda *args, **kwargs: run(kernel, args, kwargs, target=target, with_values=True))


def trace(kernel, *args, target: str | None = None, **kwargs) -> Trace:
    """Run the kernel without values and return its instruction trace."""
    kernel = _as_kernel(kernel, "nki.trace")
    run(kernel, args, kwargs, target=target, with_values=False)
    return kernel.last_trace


def _as_kernel(kernel, what: str) -> Kernel:
    if kernel is None or not callable(kernel):
        raise ArgumentError(f"{what}({kernel!r}): the first argument is the kernel function",
                            where=SourceLoc.of_caller())
    return jit(kernel)


def _check_arguments(fn, args, kwargs) -> None:
    """A launch whose arguments do not fit the kernel's signature is refused at the kernel's
    `def`, before anything runs (else the call fails inside the launcher)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as error:
        raise ArgumentError(f"kernel {getattr(fn, '__name__', fn)!r} called with arguments it does not "
                            f"take: {error}", where=_kernel_site(fn)) from None
    except ValueError:  # no signature to check (a builtin): the call itself decides
        return


def run(kernel: Kernel, args, kwargs, *, target: str | None, with_values: bool):
    """Launch every program of the kernel's grid and convert the results back."""
    _check_arguments(kernel.fn, args, kwargs)
    target = resolve_target(target)
    spec = hardware.core(target)
    programs = prod(kernel.grid) if kernel.grid else 1
    # A grid of 2 is LNC=2 where the core has it (trn2, trn3); elsewhere, like every other grid, its
    # programs run one after another on one core.
    lnc2 = programs == 2 and hardware.has_lnc2(spec)
    launch = Launch(target, 2 if lnc2 else 1, kernel.compiler)
    settings = config.current()
    # The two cores of an LNC=2 launch run as threads that share HBM: they execute eagerly, so no
    # thread ever runs another's deferred queue.
    eager = settings.eager or launch.cores > 1
    cores = [NeuronCore(spec, launch, with_values=with_values, strict=settings.strict, program_id=p,
                        grid=kernel.grid, eager=eager) for p in range(programs)]
    token = backend.activate(cores[0])
    try:
        kind, hbm_args, hbm_kwargs = interop.to_hbm(args, kwargs, "shared_hbm" if programs > 1 else "hbm")
    finally:
        backend.deactivate(token)
    # The collector off while the kernel runs, as while scheduling: a launch makes many small
    # objects (views, regions, instructions) that hold no cycles, and gen-2 passes over a growing
    # trace cost a quarter of a long trace-only run. GEMM workers get the GIL back sooner.
    runtime = current_runtime()
    with runtime.one_blas_thread(), runtime.gc_paused(), runtime.quick_gil_handoff():
        results = _launch(kernel.fn, cores, hbm_args, hbm_kwargs)
    kernel.last_trace = launch.trace
    interop.write_back(args, hbm_args, launch.trace, with_values)
    result = results[0]
    _check_outputs(result, launch, kernel.fn)
    return interop.from_hbm(result, kind, set(launch.created)) if with_values else result


def _launch(fn, cores, args, kwargs) -> list:
    results = [None] * len(cores)
    lnc2 = cores[0].launch.cores == 2  # two threads side by side; else programs one after another
    errors: dict[int, BaseException] = {}

    def program(index: int) -> None:
        token = backend.activate(cores[index])
        try:
            results[index] = fn(*args, **kwargs)
            cores[index].flush()
            if lnc2:
                lnc.finish(cores[index].launch, index)
        except BaseException as error:  # re-raised in the caller's thread below
            errors[index] = _first_error(cores[index], error)
            lnc.abandon(cores[index].launch)
        finally:
            backend.deactivate(token)

    if lnc2:
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
    for core in cores:
        core.memory.end_launch()  # a tile the kernel kept is refused by later launches
    if not errors and lnc2 and not cores[0].with_values:
        try:
            lnc.check_calls(cores[0].launch)  # the cores did not wait for each other: meet their calls now
        except KernelError as error:
            errors[0] = error
    if errors:
        raise reported_error(errors)
    for core in cores:
        core.settle()
    if lnc2:
        races.warn(cores[0].launch.trace)
    return results


def _first_error(core: NeuronCore, error: BaseException) -> BaseException:
    """The error to report: an earlier deferred instruction's execution error, if there is one."""
    try:
        core.flush()
    except Exception as earlier:  # noqa: BLE001 - any execution error outranks the later one
        return earlier
    return error


def _check_outputs(result, launch: Launch, fn) -> None:
    """Kernel outputs must be HBM tensors in shared HBM (NKI 0.3.0 and later), never on-chip tiles."""
    for tensor in interop.flatten(result):
        if not isinstance(tensor, NkiTensor):
            continue
        if tensor.storage.memory is not Memory.HBM:
            memory = tensor.storage.memory.value.upper()
            raise KernelError(f"kernel output {tensor.name!r} is an on-chip {memory} tile; kernels return "
                              f"HBM tensors", where=_kernel_site(fn), op="return",
                              hint="copy it into nl.ndarray(..., buffer=nl.shared_hbm) and return that")
        created = tensor.storage.id in launch.created
        if created and dtypes.region_of(tensor.storage) is not dtypes.SHARED_HBM:
            where = launch.created[tensor.storage.id]
            raise KernelError(f"kernel output {tensor.name!r} is in {tensor.buffer!r}, not nl.shared_hbm",
                              where=where, op="return",
                              hint="allocate outputs with nl.ndarray(..., buffer=nl.shared_hbm)")
