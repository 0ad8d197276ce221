"""EXECUTE rules for GpSimd and the sync engine: index patterns, masks, gathers, registers."""

from __future__ import annotations

import numpy as np

from trnsim.core import alu
from trnsim.core.execute import EXECUTE, F32, Operands
from trnsim.core.isa import Opcode
from trnsim.core.trace import Instruction
from trnsim.errors import UnsupportedError


def affine_values(ins: Instruction, partitions: int) -> np.ndarray:
    """offset + channel_multiplier * p + sum(step_k * i_k) over the pattern [[step, count], ...]."""
    pattern = ins.param("pattern")
    values = np.full((partitions,) + tuple(c for _, c in pattern), float(ins.param("offset", 0)), np.float64)
    values += float(ins.param("channel_multiplier", 0)) * np.arange(partitions).reshape(
        (-1,) + (1,) * len(pattern))
    for axis, (step, count) in enumerate(pattern):
        shape = [1] * (len(pattern) + 1)
        shape[axis + 1] = count
        values += step * np.arange(count).reshape(shape)
    return values


@EXECUTE.register(Opcode.IOTA)
def _iota(ins: Instruction, io: Operands) -> None:
    view = io.out(0)
    values = affine_values(ins, view.shape[0]).reshape(view.shape)
    if view.element.numpy.kind in "iu":
        io.write_raw(0, values.astype(view.element.numpy))
    else:
        io.write(0, values.astype(F32))


@EXECUTE.register(Opcode.AFFINE_SELECT)
def _affine_select(ins: Instruction, io: Operands) -> None:
    """Keep on_true where cmp_op(affine expression, 0) holds, else on_false_value."""
    on_true = io.f32(0)
    expr = affine_values(ins, on_true.shape[0]).reshape(on_true.shape).astype(F32)
    keep = alu.alu(ins.param("cmp_op"))(expr, np.float32(0)) != 0
    io.write(0, np.where(keep, on_true, np.float32(ins.param("on_false_value"))))


@EXECUTE.register(Opcode.TENSOR_PARTITION_REDUCE)
def _partition_reduce(ins: Instruction, io: Operands) -> None:
    data = io.f32(0)
    io.write(0, np.asarray(alu.reduce(ins.param("op"), data, axis=0), F32).reshape(io.out(0).shape))


@EXECUTE.register(Opcode.N_GATHER)
def _n_gather(ins: Instruction, io: Operands) -> None:
    """dst[p, j] = data[p, indices[p, j]] within each partition."""
    data = io.raw(0)
    flat = data.reshape(data.shape[0], -1)
    index = io.raw(1).reshape(data.shape[0], -1).astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= flat.shape[1]):
        raise IndexError(f"nc_n_gather index out of range [0, {flat.shape[1]})")
    gathered = np.take_along_axis(flat, index, axis=1)
    if io.inputs[0].element == io.out(0).element:
        io.write_raw(0, gathered.reshape(io.out(0).shape))
    else:
        io.write(0, gathered.astype(F32).reshape(io.out(0).shape))


@EXECUTE.register(Opcode.LOCAL_GATHER)
def _local_gather(ins: Instruction, io: Operands) -> None:
    raise UnsupportedError("nisa.local_gather is not emulated yet", what="nisa.local_gather")


@EXECUTE.register(Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD)
def _register_set(ins: Instruction, io: Operands) -> None:
    if ins.opcode is Opcode.REGISTER_LOAD:
        value = int(io.raw(0).reshape(-1)[0])
    else:
        value = int(ins.param("value"))
    io.state.registers[ins.param("register")] = value


@EXECUTE.register(Opcode.REGISTER_STORE)
def _register_store(ins: Instruction, io: Operands) -> None:
    value = io.state.registers[ins.param("register")]
    io.write_raw(0, np.full(io.out(0).shape, value, io.out(0).element.numpy))


@EXECUTE.register(Opcode.CORE_BARRIER)
def _core_barrier(ins: Instruction, io: Operands) -> None:
    """Values do not change; the front end holds every core at the barrier."""
