"""EXECUTE rules for Trn3 microscaling: `quantize_mx` and `nc_matmul_mx`.

Layout (reference numerics.md §1.9): an MX group is 32 contraction values = 8 partitions x the 4
elements packed in one x4 word, so a 128-partition x4 tile holds K = 512 and 16 groups per
column. Group g's E8M0 scale sits in partition 32*(g // 4) + g % 4 of a 128-partition scale tile
(scale tensors packed at quadrant offset 0); a scale tile with exactly one partition per group is
read in group order. `quantize_mx` uses Trn3's scale rule (twice the OCP sample rule, so the
largest value never saturates), computed by trnsim.numerics.
"""

from __future__ import annotations

import numpy as np

from trnsim import numerics
from trnsim.core.execute import EXECUTE, F32, Operands, accumulate_matmul
from trnsim.core.isa import Opcode
from trnsim.core.trace import Instruction

GROUP_PARTITIONS = 8  # partitions per MX group (x 4 packed elements = 32 values)
QUADRANT = 32  # partitions per quadrant; a quadrant's 4 groups keep their scales in it
_ELEMENT = {"float8_e4m3fn_x4": "float8_e4m3fn", "float8_e5m2_x4": "float8_e5m2",
            "float4_e2m1fn_x4": "float4_e2m1fn"}


def scale_rows(groups: int, scale_partitions: int) -> list[int]:
    """Which partition of the scale tile holds each group's scale (CHECK makes sure it has them)."""
    if scale_partitions == groups:
        return list(range(groups))
    return [QUADRANT * (g // 4) + g % 4 for g in range(groups)]


def _dequantised(io: Operands, data: int, scale: int) -> np.ndarray:
    """An x4 operand [P, F] as fp32 [P*4, F] in contraction order (partition, then element)."""
    view = io.inputs[data]
    words = io.raw(data).reshape(view.shape[0], -1)
    values = numerics.unpack_x4(words, _ELEMENT[view.element.name], axis=-1).astype(F32)
    partitions, free = words.shape
    values = values.reshape(partitions, free, 4)
    codes = io.raw(scale).view(np.uint8).reshape(io.inputs[scale].shape[0], -1)
    groups = -(-partitions // GROUP_PARTITIONS)
    per_group = codes[scale_rows(groups, codes.shape[0])][:, :free]
    factors = numerics.e8m0_factors(per_group)[np.arange(partitions) // GROUP_PARTITIONS]
    return (values * factors[:, :, None]).transpose(0, 2, 1).reshape(partitions * 4, free)


@EXECUTE.register(Opcode.MATMUL_MX)
def _matmul_mx(ins: Instruction, io: Operands) -> None:
    """dst[M, N] (+)= dequant(stationary)[K, M].T @ dequant(moving)[K, N], K = 4 x partitions."""
    accumulate_matmul(io, (_dequantised(io, 0, 2), _dequantised(io, 1, 3)), ins.param("accumulate"))


@EXECUTE.register(Opcode.QUANTIZE_MX)
def _quantize_mx(ins: Instruction, io: Operands) -> None:
    """src [P, F] (bf16/fp16) -> dst [P, F/4] x4 words and one E8M0 scale per 8 x 4 group."""
    source = io.f32(0)
    partitions, free = source.shape[0], source.size // source.shape[0]
    dst, scales = io.out(0), io.out(1)
    fmt = _ELEMENT[dst.element.name]
    blocks = source.reshape(partitions // GROUP_PARTITIONS, GROUP_PARTITIONS, free // 4, 4)
    grouped = blocks.transpose(0, 2, 1, 3).reshape(partitions // GROUP_PARTITIONS, free // 4, 32)
    mx = numerics.quantize_mx(grouped, "mxfp8_e4m3" if fmt == "float8_e4m3fn" else "mxfp8_e5m2",
                              axis=-1, block=32, scale_rule="trainium")
    elements = mx.elements.reshape(partitions // GROUP_PARTITIONS, free // 4, GROUP_PARTITIONS, 4)
    elements = elements.transpose(0, 2, 1, 3).reshape(partitions, free)
    io.write_raw(0, numerics.pack_x4(elements, fmt, axis=-1).reshape(dst.shape))
    codes = mx.scales.view(np.uint8).reshape(partitions // GROUP_PARTITIONS, free // 4)
    current = np.array(scales.array())  # rows that hold no scale keep what they had
    table = current.reshape(scales.shape[0], -1).view(np.uint8)
    table[scale_rows(codes.shape[0], scales.shape[0]), :codes.shape[1]] = codes
    io.write_raw(1, current)
