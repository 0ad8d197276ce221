"""Graphs that the default `torch.compile` backend (inductor) compiles from neuron tensors, seen
by `trnsim.torch.profile`.

AOTAutograd hands inductor the CPU buffers inside the neuron tensors, so the compiled code never
dispatches on a neuron tensor and the profiler would not see it. When the inputs Dynamo passes
the backend are neuron tensors, inductor's per-graph compiler is wrapped for that compilation:
it notes each aten node's signature at the traced shapes (as `torch.compile(backend="neuron")`
does, compile.py) and makes the compiled graph charge those nodes to the active profile every
time it runs. AOTAutograd's cache, which would hand back a compiled graph without compiling it,
is off for these compilations. Graphs compiled from CPU tensors are left exactly as they are.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from trnsim.torch import profiler
from trnsim.torch.tensor import NeuronTensor


class ProfileWarning(UserWarning):
    """Work on neuron that trnsim.torch.profile cannot see."""


def install() -> None:
    """Wrap the inductor backend's entry point (the object `torch.compile` calls) once."""
    wrapper = torch._TorchCompileInductorWrapper
    original = wrapper.__call__
    if getattr(original, "_trnsim_original", None) is not None:
        return

    def __call__(self, model_, inputs_, **kwargs):
        if not any(isinstance(value, NeuronTensor) for value in inputs_):
            return original(self, model_, inputs_, **kwargs)
        with _profiled_compilation():
            return original(self, model_, inputs_, **kwargs)

    __call__._trnsim_original = original
    wrapper.__call__ = __call__


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
        return run(inputs)
    return current_callable
