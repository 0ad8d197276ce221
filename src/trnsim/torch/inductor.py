"""Graphs that the default `torch.compile` backend (inductor) compiles from neuron tensors: built
with inductor's CPU code generator, and seen by `trnsim.torch.profile`.

Neuron tensors are host memory, so the C++ loops inductor writes for CPU run on them unchanged;
`neuron` is registered with inductor as a device that generates CPU's code (`register_codegen`).
The compiled code never dispatches its fused loops through the device, so the profiler would not
see them. When the inputs Dynamo passes the backend are neuron tensors, inductor's per-graph
compiler is wrapped for that compilation: it notes each aten node's signature at the traced shapes
(as `torch.compile(backend="neuron")` does, compile.py) and makes the compiled graph charge those
nodes to the active profile every time it runs. AOTAutograd's cache, which would hand back a
compiled graph without compiling it, is off for these compilations. The ops the compiled code does
dispatch (its extern kernels, such as mm) are not reported again. Graphs compiled from CPU tensors
are left exactly as they are.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from trnsim.torch import native, profiler
from trnsim.torch.tensor import NAME, is_neuron


class ProfileWarning(UserWarning):
    """Work on neuron that trnsim.torch.profile cannot see."""


def install() -> None:
    """Wrap the inductor backend's entry point (the object `torch.compile` calls) once."""
    wrapper = torch._TorchCompileInductorWrapper
    original = wrapper.__call__
    if getattr(original, "_trnsim_original", None) is not None:
        return

    def __call__(self, model_, inputs_, **kwargs):
        if not any(is_neuron(value) for value in inputs_):
            return original(self, model_, inputs_, **kwargs)
        register_codegen()
        with _profiled_compilation():
            return original(self, model_, inputs_, **kwargs)

    __call__._trnsim_original = original
    wrapper.__call__ = __call__


@functools.cache
def register_codegen() -> None:
    """Have inductor generate CPU's code (C++ loops, a Python wrapper) for the neuron device."""
    from torch._dynamo.device_interface import CpuInterface, register_interface_for_device
    from torch._inductor.codegen import common
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.virtualized import V

    class NeuronWrapperCodegen(PythonWrapperCodegen):
        """CPU's wrapper code; it calls a neuron graph's kernels as it calls a CPU graph's."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper,
                                                   partition_signatures)
            return NeuronWrapperCodegen()

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            if not triton and device.type == NAME:
                self.writeline(self.wrap_kernel_call(kernel_name, call_args))
                return
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton,
                                                 **kwargs)

    common.init_backend_registration()
    common.register_backend_for_device(NAME, CppScheduling, NeuronWrapperCodegen)
    common.register_device_op_overrides(NAME, CpuDeviceOpOverrides())
    register_interface_for_device(NAME, CpuInterface)


@contextlib.contextmanager
def _profiled_compilation():
    """During one compilation: inductor's `compile_fx` gets a per-graph compiler (used for the
    forward now and the backward later) that wraps each compiled graph's callable, and
    AOTAutograd's cache is off. A compiled graph without a callable yet (inductor output types
    other than CompiledFxGraph) cannot be wrapped: that is said with a ProfileWarning."""
    from torch._functorch import config as functorch_config
    from torch._inductor import compile_fx as module

    compile_fx = module.compile_fx

    def profiling(compile_inner):
        def profiled(gm, example_inputs, **kwargs):
            keys = _keys(gm)
            compiled = compile_inner(gm, example_inputs, **kwargs)
            run = getattr(compiled, "current_callable", None)
            if run is None:
                warnings.warn(f"inductor compiled a graph as {type(compiled).__name__}, which trnsim "
                              "cannot wrap: trnsim.torch.profile will not see its ops", ProfileWarning,
                              stacklevel=2)
            else:
                compiled.current_callable = _charging(run, keys)
            return compiled
        profiled.profiling = True
        return profiled

    def compile_with_profile(model_, example_inputs_, inner_compile=module.compile_fx_inner, **kwargs):
        # modes other than the default (reduce-overhead, max-autotune) pass their own inner compiler;
        # compile_fx calls itself again with config patches, passing the one already wrapped here
        if not getattr(inner_compile, "profiling", False):
            inner_compile = profiling(inner_compile)
        return compile_fx(model_, example_inputs_, inner_compile=inner_compile, **kwargs)

    module.compile_fx = compile_with_profile
    try:
        with functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        module.compile_fx = compile_fx


def _keys(gm: torch.fx.GraphModule) -> list[tuple]:
    """The profile key of every aten node of the graph, at the shapes it was traced with."""
    from trnsim.torch.compile import signature_of

    return [signature_of(node) for node in gm.graph.nodes
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)]


def _charging(run, keys: list[tuple]):
    """`run` (a compiled graph's boxed callable) that first charges `keys` to the active profile."""
    def current_callable(inputs):
        active = profiler.current()
        if active is not None:
            for key in keys:
                active.record_key(key)
        with native.unrecorded():
            return run(inputs)
    return current_callable
