"""EXECUTE rules for the Vector and Scalar engines: element-wise math, reductions, scans, top-8."""

from __future__ import annotations

import numpy as np

from trnsim.core import alu
from trnsim.core.execute import EXECUTE, F32, Operands
from trnsim.core.isa import Engine, Opcode
from trnsim.core.trace import InputRef, Instruction


def _free_axes(values: np.ndarray) -> tuple[int, ...]:
    return tuple(range(1, values.ndim))


def _binary(name: str, a, b, reverse: bool = False):
    fn = alu.alu(name)
    return fn(b, a) if reverse else fn(a, b)


def _reduce_free(name: str, values: np.ndarray) -> np.ndarray:
    flat = values.reshape(values.shape[0], -1)
    return np.asarray(alu.reduce(name, flat, axis=1), F32).reshape(-1, 1)


def _accumulates(ins: Instruction, io: Operands) -> bool:
    """Whether an instruction touches its engine's accumulator: it reads it out (`reduce_res`), or
    its `reduce_cmd` changes it (with `reduce_res=None` the sum stays in the registers for a later
    call to read)."""
    return len(io.outputs) > 1 or ins.param("reduce_cmd") not in (None, "idle")


def _accumulate(ins: Instruction, io: Operands, values: np.ndarray, out_index: int,
                default_cmd: str = "reset_reduce") -> None:
    """The engines' accumulator registers: reset / reduce / reset_reduce / load_reduce (reduce_init
    loaded, then reduced onto), read out to reduce_res.
    The Scalar Engine has its own (activation's `reduce_regs`); the Vector Engine's are shared by
    its accumulating instructions (exponential, range_select, select_reduce, tensor_scalar_reduce:
    the nki.isa docs), so registers are kept per engine and reduction op."""
    op = ins.param("reduce_op") or "add"
    cmd = ins.param("reduce_cmd") or default_cmd
    partitions = values.shape[0]
    registers, key = io.state.accumulators, (ins.engine, op)
    part = _reduce_free(op, values)[:, 0]
    if cmd in ("reset", "reset_reduce") or registers.get(key) is None:
        identity = alu.ALU[op][1] if op in alu.ALU else 0.0
        registers[key] = np.full(io.state.partitions, identity if identity is not None else 0.0, F32)
    if cmd == "load_reduce":
        registers[key][:partitions] = np.broadcast_to(np.asarray(io.value("reduce_init"), F32).reshape(-1),
                                                      (partitions,))
    if cmd in ("reduce", "reset_reduce", "load_reduce"):
        registers[key][:partitions] = alu.reduce(op, np.stack([registers[key][:partitions], part]), axis=0)
    if out_index < len(io.outputs):
        result = registers[key][:partitions] if cmd != "idle" else part
        if ins.param("reduce_res_negate"):
            result = -result
        io.write(out_index, result.reshape(-1, 1))


@EXECUTE.register(Opcode.ACTIVATION, Opcode.ACTIVATION_REDUCE)
def _activation(ins: Instruction, io: Operands) -> None:
    """dst = op(data * scale + bias), or for activate2 op((data op0 imm0) op1 imm1); optionally
    reduce along the free dims."""
    data = io.f32(0)
    if ins.param("op0") is not None:
        imm0, imm1 = _per_partition(io.value("imm0"), data.ndim), _per_partition(io.value("imm1"), data.ndim)
        x = _binary(ins.param("op1"), _binary(ins.param("op0"), data, imm0, ins.param("reverse0")), imm1,
                    ins.param("reverse1"))
    else:
        x = data * _per_partition(io.value("scale", 1.0), data.ndim)
        if io.value("bias") is not None:
            x = x + _per_partition(io.value("bias"), data.ndim)
    if ins.param("op") == "prelu":
        slope = _per_partition(io.value("relu_param", 0.0), data.ndim)
        y = np.where(x > 0, x, slope * x).astype(F32)
    else:
        y = alu.apply_activation(ins.param("op"), x)
    io.write(0, y)
    if _accumulates(ins, io):
        _accumulate(ins, io, y, 1, "idle" if ins.opcode is Opcode.ACTIVATION else "reset_reduce")


def _per_partition(value, ndim: int):
    """A [P,1] operand broadcasts along the free dims; a Python number is used as is."""
    if isinstance(value, np.ndarray) and value.ndim:
        return value.reshape(value.shape[0], *([1] * (ndim - 1)))
    return np.float32(value) if not isinstance(value, np.ndarray) else value


def _write_exact(io: Operands, index: int, values) -> None:
    """Integer results of bitwise ops keep every bit in an integer destination (the fp32 cast engine
    results take would round values past 2**24, e.g. an OR into a float's int32 bit pattern);
    other results are cast as usual."""
    view, values = io.out(index), np.asarray(values)
    if values.dtype.kind not in "iu" or view.element.numpy.kind not in "iu":
        io.write(index, values)
        return
    if values.size == int(np.prod(view.shape)):
        values = values.reshape(view.shape)
    io.write_raw(index, np.broadcast_to(values, view.shape).astype(view.element.numpy))


def _operand(io: Operands, key: str, bits: bool):
    """A scalar operand: a bitwise op reads a tile operand's stored integers, not their fp32 values."""
    ref = io.ins.params.get(key)
    return io.raw(ref.index) if bits and isinstance(ref, InputRef) else io.value(key)


INTEGER_EXACT = frozenset({"add", "subtract", "multiply", "maximum", "minimum"})
"""Arithmetic that int32/uint32 tiles do in native integer arithmetic on GpSimd (nki.isa
tensor_tensor: "When all input/output tiles are int32 or uint32, the operation defaults to GpSimd
Engine, which uses native integer arithmetic"); through fp32 (the Vector Engine's) it rounds past
2**24."""


def _all_int32(io: Operands) -> bool:
    return all(view.element.name in ("int32", "uint32") for view in (*io.inputs, *io.outputs))


@EXECUTE.register(Opcode.TENSOR_TENSOR)
def _tensor_tensor(ins: Instruction, io: Operands) -> None:
    op = ins.param("op")
    exact = op in alu.BITWISE or (op in INTEGER_EXACT and ins.engine is Engine.GPSIMD and _all_int32(io))
    read = io.raw if exact else io.f32
    data1 = read(0)
    data2 = read(1).reshape(data1.shape)  # same size (CHECK); the access patterns may differ
    if exact:
        if op not in alu.BITWISE:
            data1, data2 = data1.astype(np.int64), data2.astype(np.int64)
        _write_exact(io, 0, _binary(op, data1, data2))
    else:
        io.write(0, _binary(op, data1, data2))


def _tensor_scalar_values(ins: Instruction, io: Operands) -> np.ndarray:
    raw = ins.param("op0") in alu.BITWISE
    data = io.raw(0) if raw else io.f32(0)
    if ins.param("op0") in alu.UNARY:  # nl.abs and the like: no operand
        out = alu.UNARY[ins.param("op0")][0](data)
    else:
        out = _binary(ins.param("op0"), data, _scalar_operand(io, "operand0", raw, data.ndim),
                      ins.param("reverse0", False))
    if ins.param("op1") is not None:
        bits = ins.param("op1") in alu.BITWISE
        out = _binary(ins.param("op1"), out, _scalar_operand(io, "operand1", bits, data.ndim),
                      ins.param("reverse1", False))
    return out


def _scalar_operand(io: Operands, key: str, bits: bool, ndim: int):
    """A scalar operand, per partition. A bitwise op's whole-number immediate is a bit pattern,
    kept as an integer (an fp32 cast rounded 16777217 to 16777216)."""
    value = _operand(io, key, bits)
    if bits and not isinstance(value, np.ndarray) and float(value).is_integer():
        return int(value)
    return _per_partition(value, ndim)


@EXECUTE.register(Opcode.TENSOR_SCALAR)
def _tensor_scalar(ins: Instruction, io: Operands) -> None:
    _write_exact(io, 0, _tensor_scalar_values(ins, io))


@EXECUTE.register(Opcode.TENSOR_SCALAR_REDUCE)
def _tensor_scalar_reduce(ins: Instruction, io: Operands) -> None:
    values = np.asarray(_tensor_scalar_values(ins, io), F32)
    io.write(0, values)
    if _accumulates(ins, io):
        _accumulate(ins, io, values, 1)


@EXECUTE.register(Opcode.SCALAR_TENSOR_TENSOR)
def _scalar_tensor_tensor(ins: Instruction, io: Operands) -> None:
    """dst = (data op0 operand0) op1 operand1, operand1 a tile."""
    data = io.f32(0)
    first = _binary(ins.param("op0"), data, _per_partition(io.value("operand0"), data.ndim),
                    ins.param("reverse0", False))
    operand1 = io.value("operand1").reshape(data.shape)
    io.write(0, _binary(ins.param("op1"), first, operand1, ins.param("reverse1", False)))


@EXECUTE.register(Opcode.TENSOR_REDUCE)
def _tensor_reduce(ins: Instruction, io: Operands) -> None:
    bits = ins.param("op") in alu.BITWISE
    data = io.raw(0) if bits else io.f32(0)
    result = np.asarray(alu.reduce(ins.param("op"), data, axis=ins.param("axis")))
    result = result if bits else result.astype(F32)
    if ins.param("negate"):
        result = -result
    _write_exact(io, 0, result.reshape(io.out(0).shape))


@EXECUTE.register(Opcode.TENSOR_TENSOR_SCAN)
def _tensor_tensor_scan(ins: Instruction, io: Operands) -> None:
    """r[t] = (data0[t] op0 r[t-1]) op1 data1[t] along the flattened free dim. With `pre_op`
    (tensor_scalar_cumulative) data0 is first combined with a scalar: data0 pre_op pre_operand."""
    data0, data1 = io.f32(0), io.f32(1)
    if ins.param("pre_op"):
        data0 = _binary(ins.param("pre_op"), data0, _per_partition(io.value("pre_operand"), data0.ndim),
                        ins.param("pre_reverse", False))
    shape = data0.shape
    data0, data1 = data0.reshape(shape[0], -1), data1.reshape(shape[0], -1)
    carry = np.broadcast_to(_per_partition(io.value("initial", 0.0), 2), (shape[0], 1))[:, 0].astype(F32)
    cmd, registers = ins.param("reduce_cmd"), io.state.accumulators
    key = (ins.engine, ins.param("op0"))  # tensor_scalar_cumulative's accumulator: its op1's
    if cmd == "reduce" and registers.get(key) is not None:
        carry = registers[key][:shape[0]].copy()
    out = np.empty_like(data0)
    op0, op1 = alu.alu(ins.param("op0")), alu.alu(ins.param("op1"))
    rev0, rev1 = ins.param("reverse0", False), ins.param("reverse1", False)
    for t in range(data0.shape[1]):
        step = op0(carry, data0[:, t]) if rev0 else op0(data0[:, t], carry)
        carry = (op1(data1[:, t], step) if rev1 else op1(step, data1[:, t])).astype(F32)
        out[:, t] = carry
    io.write(0, out.reshape(shape))
    if cmd is not None:  # the scan's last value is left in the accumulator
        if registers.get(key) is None:
            registers[key] = np.zeros(io.state.partitions, F32)
        registers[key][:shape[0]] = carry


@EXECUTE.register(Opcode.RECIPROCAL)
def _reciprocal(ins: Instruction, io: Operands) -> None:
    io.write(0, np.float32(1.0) / io.f32(0))


@EXECUTE.register(Opcode.EXPONENTIAL)
def _exponential(ins: Instruction, io: Operands) -> None:
    values = np.exp(io.f32(0) - _per_partition(io.value("max_value", 0.0), io.f32(0).ndim))
    io.write(0, values)
    if _accumulates(ins, io):
        _accumulate(ins, io, values, 1, "idle")


@EXECUTE.register(Opcode.BN_STATS)
def _bn_stats(ins: Instruction, io: Operands) -> None:
    """Per partition: (count, mean, M2) of the even and of the odd elements: 6 values."""
    data = io.f32(0).reshape(io.f32(0).shape[0], -1).astype(np.float64)
    parts = []
    for half in (data[:, 0::2], data[:, 1::2]):
        count = half.shape[1]
        mean = half.mean(axis=1) if count else np.zeros(data.shape[0])
        m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if count else np.zeros(data.shape[0])
        parts += [np.full(data.shape[0], count, np.float64), mean, m2]
    io.write(0, np.stack(parts, axis=1).astype(F32))


@EXECUTE.register(Opcode.BN_AGGR)
def _bn_aggr(ins: Instruction, io: Operands) -> None:
    """Combine bn_stats groups (Chan et al.) into mean and population variance per partition."""
    stats = io.f32(0).reshape(io.f32(0).shape[0], -1, 3).astype(np.float64)
    counts, means, m2 = stats[..., 0], stats[..., 1], stats[..., 2]
    total = counts.sum(axis=1)
    mean = (counts * means).sum(axis=1) / total
    var = (m2.sum(axis=1) + (counts * (means - mean[:, None]) ** 2).sum(axis=1)) / total
    io.write(0, np.stack([mean, var], axis=1).astype(F32))


@EXECUTE.register(Opcode.MAX8)
def _max8(ins: Instruction, io: Operands) -> None:
    data = io.f32(0).reshape(io.f32(0).shape[0], -1)
    io.write(0, -np.sort(-data, axis=1)[:, :8])


@EXECUTE.register(Opcode.FIND_INDEX8)
def _find_index8(ins: Instruction, io: Operands) -> None:
    """Index of the first occurrence of each of 8 values per partition; no match gives all ones.
    A value repeated in vals takes the next occurrences in turn, in ascending positions (the
    nc_match_replace8 doc: find_index8 "pairs duplicate vals with their matching positions in
    ascending order across dst_idx columns", as max8 lists a repeated maximum once per copy);
    a repeat with no occurrence left gets all ones."""
    data = io.f32(0).reshape(io.f32(0).shape[0], -1)
    vals = io.f32(1).reshape(data.shape[0], -1)
    hits = data[:, None, :] == vals[:, :, None]
    same = vals[:, :, None] == vals[:, None, :]
    repeat = np.tril(same, k=-1).sum(axis=2)  # how many earlier vals of the partition are equal
    nth = hits & (np.cumsum(hits, axis=2) == (repeat + 1)[:, :, None])
    index = np.where(nth.any(axis=2), nth.argmax(axis=2), 0xFFFFFFFF).astype(np.uint32)
    io.write_raw(0, index.astype(io.out(0).element.numpy))


@EXECUTE.register(Opcode.MATCH_REPLACE8)
def _match_replace8(ins: Instruction, io: Operands) -> None:
    """Replace the first remaining occurrence of each of 8 values (last value first) with imm."""
    data = io.f32(0).reshape(io.f32(0).shape[0], -1).copy()
    vals = io.f32(1).reshape(data.shape[0], -1)
    index = np.full(vals.shape, 0xFFFFFFFF, np.uint32)
    for p in range(data.shape[0]):
        for k in reversed(range(vals.shape[1])):
            found = np.flatnonzero(data[p] == vals[p, k])
            if found.size:
                data[p, found[0]] = np.nan
                index[p, k] = found[0]
    data[np.isnan(data) & ~np.isnan(io.f32(0).reshape(data.shape))] = ins.param("imm")
    io.write(0, data.reshape(io.out(0).shape))
    if len(io.outputs) > 1:
        io.write_raw(1, index.astype(io.out(1).element.numpy))


@EXECUTE.register(Opcode.RANGE_SELECT)
def _range_select(ins: Instruction, io: Operands) -> None:
    data = io.f32(0)
    flat = data.reshape(data.shape[0], -1)
    index = np.arange(flat.shape[1], dtype=F32)[None, :] + np.float32(ins.param("range_start", 0))
    keep = (_binary(ins.param("comp_op0"), index, _per_partition(io.value("bound0"), 2)) != 0) & (
        _binary(ins.param("comp_op1"), index, _per_partition(io.value("bound1"), 2)) != 0)
    values = np.where(keep, flat, np.float32(ins.param("on_false_value"))).astype(F32)
    io.write(0, values.reshape(data.shape))
    if _accumulates(ins, io):
        _accumulate(ins, io, values, 1)


@EXECUTE.register(Opcode.SELECT_REDUCE)
def _select_reduce(ins: Instruction, io: Operands) -> None:
    on_true = io.f32(1)
    keep = (io.f32(0).reshape(on_true.shape) != 0) ^ bool(ins.param("reverse_pred", False))
    on_false = _per_partition(io.value("on_false"), on_true.ndim)
    values = np.where(keep, on_true, on_false).astype(F32)
    io.write(0, values)
    if _accumulates(ins, io):
        _accumulate(ins, io, values, 1, "idle")


@EXECUTE.register(Opcode.STREAM_SHUFFLE)
def _stream_shuffle(ins: Instruction, io: Operands) -> None:
    """Within each 32-partition group, dst partition i takes src partition mask[i] (255 keeps dst).
    A data move: src and dst share a dtype (CHECK), so the bits pass unchanged."""
    result = io.out(0).array().copy()
    src = io.raw(0).reshape((-1, *result.shape[1:]))
    mask = ins.param("shuffle_mask")
    for p in range(result.shape[0]):
        chosen = mask[p % len(mask)]
        if chosen != 255:
            result[p] = src[(p // len(mask)) * len(mask) + chosen]
    io.write_raw(0, result)


@EXECUTE.register(Opcode.RNG)
def _rng(ins: Instruction, io: Operands) -> None:
    view = io.out(0)
    if view.element.numpy.kind in "iu":
        bits = io.state.rng.integers(0, 2 ** 32, size=view.shape, dtype=np.uint64)
        io.write_raw(0, bits.astype(np.uint32).view(np.int32).astype(view.element.numpy, casting="unsafe"))
    else:
        low, high = ins.param("low", 0.0), ins.param("high", 1.0)
        io.write(0, np.float32(low) + np.float32(high - low) * io.state.rng.random(view.shape, dtype=F32))


@EXECUTE.register(Opcode.DROPOUT)
def _dropout(ins: Instruction, io: Operands) -> None:
    """Zero each element with probability `prob` (no rescaling of the kept ones). dst has data's
    dtype (CHECK), so a kept element keeps its bits ("kept with their original values", the doc)."""
    data = io.raw(0)
    prob = _per_partition(io.value("prob"), data.ndim)
    drop = io.state.rng.random(data.shape, dtype=F32) < prob
    io.write_raw(0, np.where(drop, np.zeros((), data.dtype), data))
