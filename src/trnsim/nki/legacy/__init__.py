"""The old NKI API (`neuronxcc.nki`, Neuron SDK up to 2.26) on trnsim's NeuronCore.

    import trnsim.nki.compat; trnsim.nki.compat.enable_legacy()
    import neuronxcc.nki as nki, neuronxcc.nki.language as nl, neuronxcc.nki.isa as nisa

A second language layer over the 0.6 front end's machine, checks, trace and timing: see
docs/legacy-nki.md. `nki.jit(mode=...)`, `simulate_kernel`, `baremetal` and `benchmark` all run
the kernel with values on the CPU; benchmark mode reports the timing model's latency.
"""

from trnsim.nki.legacy import compiler, isa, language, typing
from trnsim.nki.legacy.launch import (
    BenchmarkResult,
    LegacyKernel,
    baremetal,
    benchmark,
    instruction_trace,
    jit,
    profile,
    simulate_kernel,
    trace,
)

__all__ = ["BenchmarkResult", "LegacyKernel", "baremetal", "benchmark", "compiler", "instruction_trace",
           "isa", "jit", "language", "profile", "simulate_kernel", "trace", "typing"]
