"""GPU instances for comparison: a roofline per op and an NCCL ring model for collectives.

The peaks, HBM bandwidth, NVLink and EFA rates come from trnsim.hardware; the constants below
are achieved fractions of them, each taken from a public measurement named beside it. trnsim
models no GPU kernels: this is the comparison side of the planner, not an emulator.
"""

from __future__ import annotations

TENSOR_EFFICIENCY = 0.55
"""Achieved fraction of dense peak by matmul-bound ops: inference-sim's fixed prefill MFU on H100
([L12]); a peer tool's constant, not fitted here."""
MEMORY_EFFICIENCY = 0.90
"""Achieved fraction of HBM bandwidth by memory-bound ops: llm-analysis's suggested memory
efficiency ([L9]); a peer tool's constant, not fitted here."""
RING_BUS_EFFICIENCY = 365 / 450
"""NCCL ring all-reduce busbw / NVLink line rate per direction on 8 x H100: about 365 of 450 GB/s
([N2] nccl-tests issue 212)."""
NETWORK_EFFICIENCY = 330.93 / 400
"""Inter-node all-reduce busbw over 3.2 Tbps (400 GB/s) per node: 330.93 GB/s measured on 4 x 8 H100
([N5] vpbenchmarking)."""
HOP_LATENCY_S = 936.25e-9
"""Per-step latency of a ring step through NVSwitch: ASTRA-sim's validated HGX-H100 switch
latency ([L2] HGX-H100-validated.yml)."""
OP_LAUNCH_S = 4e-6
"""Per-kernel launch gap on a GPU stream (CUDA kernel launch overhead, a few microseconds; [L12]
inference-sim's roofline adds none, which under-predicts small ops)."""

BUS_FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
               "permute": lambda n: 1.0}
"""busbw = algbw x factor (nccl-tests PERFORMANCE.md [N1])."""


def op_seconds(machine, flops: float, bytes_moved: float, dtype: str) -> float:
    """Roofline time of one op on one GPU at the achieved fractions, plus a kernel launch."""
    peak = machine.peak_per_rank("fp8" if dtype.startswith("float8") else "bf16")
    compute = flops / (peak * TENSOR_EFFICIENCY)
    memory = bytes_moved / (machine.hbm_bytes_per_s_per_rank * MEMORY_EFFICIENCY)
    return max(compute, memory) + OP_LAUNCH_S


def collective_seconds(machine, op: str, size_bytes: int, ranks: int) -> float:
    """Ring collective over `ranks` GPUs: the busbw of NVLink inside a node, EFA across nodes."""
    spec = machine.spec
    per_node = machine.ranks
    if ranks <= per_node:
        busbw = spec.link_bytes_per_s_per_chip / 2 * RING_BUS_EFFICIENCY  # 900 GB/s is both directions
    else:
        busbw = min(spec.network_bytes_per_s * NETWORK_EFFICIENCY,
                    spec.link_bytes_per_s_per_chip / 2 * RING_BUS_EFFICIENCY)
    algbw = busbw / BUS_FACTORS[op](ranks)
    steps = 2 * (ranks - 1) if op == "all_reduce" else ranks - 1
    return size_bytes / algbw + steps * HOP_LATENCY_S
