"""Hand-built instructions and traces for the timing tests (no kernel front end needed)."""

from __future__ import annotations

import itertools

from trnsim.core.isa import Engine, Memory, Opcode
from trnsim.core.trace import Instruction, Region, Trace, freeze_params

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3": 1, "int32": 4,
               "float8_e4m3fn_x4": 4, "uint8": 1}
_ids = itertools.count(1000)


def region(memory: Memory, free: int | tuple[int, ...], *, partitions: int = 128,
           dtype: str = "bfloat16", buffer: int | None = None, offset: int = 0,
           partition_start: int = 0, stride: int = 1, name: str = "t") -> Region:
    """A region of `partitions` x `free` elements (HBM: one row of partitions * free)."""
    dims = (free,) if isinstance(free, int) else tuple(free)
    pattern, step = [], stride
    for count in reversed(dims):
        pattern.append((step, count))
        step *= count
    pattern = tuple(reversed(pattern))
    if memory is Memory.HBM:
        pattern = ((step, partitions),) + pattern
        partitions = 1
    return Region(memory=memory, buffer=next(_ids) if buffer is None else buffer, name=name,
                  address_bytes=0, partition_start=partition_start, partition_count=partitions,
                  pattern=pattern, offset=offset, dtype=dtype, dtype_bytes=DTYPE_BYTES[dtype])


def instr(opcode: Opcode, engine: Engine, outputs, inputs, **params) -> Instruction:
    return Instruction(opcode=opcode, engine=engine, outputs=tuple(outputs), inputs=tuple(inputs),
                       params=freeze_params(params))


def load(dst: Region, src: Region, **params) -> Instruction:
    return instr(Opcode.DMA_COPY, Engine.DMA, [dst], [src], **params)


def matmul(dst: Region, stationary: Region, moving: Region, **params) -> Instruction:
    return instr(Opcode.MATMUL, Engine.TENSOR, [dst], [stationary, moving], **params)


def compute_bound_trace(target: str = "trn1", tiles: int = 64, dtype: str = "bfloat16") -> Trace:
    """One pair of loads, then many matmuls on them into one PSUM tile, one copy out, one store."""
    lhs = region(Memory.SBUF, 128, dtype=dtype)
    rhs = region(Memory.SBUF, 512, dtype=dtype)
    acc = region(Memory.PSUM, 512, dtype="float32")
    out = region(Memory.SBUF, 512, dtype=dtype)
    trace = Trace(target, [load(lhs, region(Memory.HBM, 128, dtype=dtype)),
                           load(rhs, region(Memory.HBM, 512, dtype=dtype))])
    trace.extend(matmul(acc, lhs, rhs) for _ in range(tiles))
    trace.append(instr(Opcode.TENSOR_COPY, Engine.VECTOR, [out], [acc]))
    trace.append(load(region(Memory.HBM, 512, dtype=dtype), out))
    return trace


def dma_bound_trace(target: str = "trn1", tiles: int = 64) -> Trace:
    """Per tile: two fresh 2 KiB-per-partition loads, one small matmul: the loads dominate."""
    acc = region(Memory.PSUM, 128, dtype="float32")
    trace = Trace(target)
    for _ in range(tiles):
        lhs, rhs = region(Memory.SBUF, 1024), region(Memory.SBUF, 1024)
        trace.append(load(lhs, region(Memory.HBM, 1024)))
        trace.append(load(rhs, region(Memory.HBM, 1024)))
        trace.append(matmul(acc, region(Memory.SBUF, 128, buffer=lhs.buffer),
                            region(Memory.SBUF, 128, buffer=rhs.buffer)))
    return trace
