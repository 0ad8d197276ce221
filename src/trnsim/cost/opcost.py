"""`OpCost`, the answer of every op family, and the roofline it must respect.

The roofline is the time the op's unavoidable work takes at the core's published peaks: its
FLOPs at the Tensor Engine's peak for the dtype, and its compulsory HBM traffic (every input read
once, every output written once) at the DMA queues' peak rate. No kernel can beat it, so a
prediction is never below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.hardware.specs import CoreSpec

_PEAK_CLASS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3": "fp8",
               "float8_e5m2": "fp8", "float8_e4m3fn": "fp8"}
"""dtype name -> key of `CoreSpec.peak_flops` (the same classes the profiler's HFU uses)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OpCost:
    """Cost of one op on one physical NeuronCore.

    `seconds` is the prediction; `flops` the model FLOPs (2 per multiply-add); `bytes` the
    compulsory HBM traffic; `bound` the engine that limits it ("tensor", "vector", "scalar",
    "gpsimd", "dma"); `lower_bound_seconds` the roofline, never above `seconds`.
    """

    op: str
    seconds: float
    flops: float
    bytes: float
    bound: str
    lower_bound_seconds: float
    tier: str
    target: str


def roofline_seconds(core: CoreSpec, flops: float, bytes_moved: float, dtype: str) -> float:
    """The larger of FLOPs at the Tensor Engine's peak and bytes at the DMA queues' peak. A core
    that publishes no plain-fp8 peak (NeuronCore-v4: MXFP8 only) runs fp8 at its 16-bit rate."""
    peak = core.peak_flops.get(_PEAK_CLASS.get(dtype, "fp32")) or core.peak_flops["bf16"]
    compute_s = flops / peak if flops else 0.0
    dma_peak = core.dma_queues * core.dma_peak_bytes_per_s_per_queue
    return max(compute_s, bytes_moved / dma_peak)
