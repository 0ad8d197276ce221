"""EXECUTE rules for GpSimd and the sync engine: index patterns, masks, gathers, segment scans,
PRNG state, registers."""

from __future__ import annotations

import numpy as np

from trnsim.core import alu
from trnsim.core.execute import EXECUTE, F32, Operands, hazard, saturated, to_storage
from trnsim.core.isa import Opcode, RegisterRef
from trnsim.core.trace import Instruction


def affine_values(ins: Instruction, io: Operands, partitions: int) -> np.ndarray:
    """offset + channel_multiplier * p + sum(step_k * i_k) over the pattern [[step, count], ...], in
    32-bit integer arithmetic ("computed in 32-bit integer arithmetic", nki.isa.iota): a sum past
    int32 wraps. A register offset is read now, when the instruction runs."""
    pattern = ins.param("pattern")
    offset = ins.param("offset", 0)
    if type(offset) is RegisterRef:
        offset = io.state.registers.get(offset.register, 0)  # a register never moved holds 0
    values = np.full((partitions,) + tuple(c for _, c in pattern), int(offset), np.int64)
    values += int(ins.param("channel_multiplier", 0)) * np.arange(partitions, dtype=np.int64).reshape(
        (-1,) + (1,) * len(pattern))
    for axis, (step, count) in enumerate(pattern):
        shape = [1] * (len(pattern) + 1)
        shape[axis + 1] = count
        values += step * np.arange(count, dtype=np.int64).reshape(shape)
    return values.astype(np.int32)  # two's complement wrap (int64 holds every exact sum of int32 terms)


@EXECUTE.register(Opcode.IOTA)
def _iota(ins: Instruction, io: Operands) -> None:
    view = io.out(0)
    values = affine_values(ins, io, view.shape[0]).reshape(view.shape)
    if view.element.numpy.kind in "iu":
        io.write_raw(0, saturated(values, view.element.numpy))
    else:
        io.write(0, values.astype(F32))


@EXECUTE.register(Opcode.AFFINE_SELECT)
def _affine_select(ins: Instruction, io: Operands) -> None:
    """Keep on_true where cmp_op(affine expression, 0) holds, else on_false_value."""
    on_true = io.f32(0)
    expr = affine_values(ins, io, on_true.shape[0]).reshape(on_true.shape)
    keep = alu.alu(ins.param("cmp_op"))(expr, np.int32(0)) != 0  # an integer compare: exact past 2**24
    on_false = np.float32(ins.param("on_false_value"))
    if io.inputs[0].element != io.out(0).element:  # the doc: only a dtype change goes through fp32
        io.write(0, np.where(keep, on_true, on_false))
        return
    held = io.raw(0)  # same dtype: a selected element's bits pass unchanged (int32 past 2**24)
    fill = to_storage(np.full(held.shape, on_false, F32), io.out(0).element)
    io.write_raw(0, np.where(keep.reshape(held.shape), held, fill))


@EXECUTE.register(Opcode.TENSOR_PARTITION_REDUCE)
def _partition_reduce(ins: Instruction, io: Operands) -> None:
    op = ins.param("op")
    if op in alu.BITWISE:  # bit patterns, as the integers they are (fp32 rounded past 2**24)
        bits = alu.reduce(op, io.raw(0), axis=0)
        io.write_raw(0, np.asarray(bits).reshape(io.out(0).shape).astype(io.out(0).element.numpy))
        return
    data = io.f32(0)
    total = np.mean(data, axis=0, dtype=F32) if op == "average" else alu.reduce(op, data, axis=0)
    io.write(0, np.asarray(total, F32).reshape(io.out(0).shape))


@EXECUTE.register(Opcode.N_GATHER)
def _n_gather(ins: Instruction, io: Operands) -> None:
    """dst[p, j] = data[p, indices[p, j]] within each partition."""
    data = io.raw(0)
    flat = data.reshape(data.shape[0], -1)
    index = io.raw(1).reshape(data.shape[0], -1).astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= flat.shape[1]):
        bad = int(index.min()) if index.min() < 0 else int(index.max())
        raise hazard(ins, f"index {bad} read from {ins.inputs[1].name!r} is outside the "
                          f"{flat.shape[1]} elements per partition of {ins.inputs[0].name!r}")
    gathered = np.take_along_axis(flat, index, axis=1)
    if io.inputs[0].element == io.out(0).element:
        io.write_raw(0, gathered.reshape(io.out(0).shape))
    else:
        io.write(0, gathered.astype(F32).reshape(io.out(0).shape))


@EXECUTE.register(Opcode.LOCAL_GATHER)
def _local_gather(ins: Instruction, io: Operands) -> None:
    """Each GpSimd core serves one group of partitions: every partition of the group reads the
    group's indices (flattened partition-first) from its own row, num_elem_per_idx elements each."""
    data = io.raw(0)
    rows = data.shape[0]
    flat = data.reshape(rows, -1)
    index = io.raw(1).reshape(rows, -1).astype(np.int64)
    group, valid = ins.param("group_partitions"), ins.param("num_valid_indices")
    span = np.arange(ins.param("num_elem_per_idx"))
    gathered = np.empty((rows, valid * span.size), flat.dtype)
    for start in range(0, rows, group):
        starts = index[start:start + group].reshape(-1, order="F")[:valid]
        columns = (starts[:, None] + span).reshape(-1)
        if columns.size and columns.max() >= flat.shape[1]:
            raise hazard(ins, f"local_gather index {int(starts.max())} + {span.size} elements reaches past "
                              f"the {flat.shape[1]} elements per partition of {ins.inputs[0].name!r} "
                              f"(partitions {start}..{start + group - 1})")
        gathered[start:start + group] = flat[start:start + group][:, columns]
    io.write_raw(0, gathered.reshape(io.out(0).shape))


@EXECUTE.register(Opcode.SEQUENCE_BOUNDS)
def _sequence_bounds(ins: Instruction, io: Operands) -> None:
    """[start, end) of the run of equal segment ids each element is in; id 0 is padding (n, -1).
    "All segment IDs must be non-negative" (nki.isa.sequence_bounds): a negative one is a value
    the check cannot see, so it is a hazard here (as an out-of-range nc_n_gather index is)."""
    ids = io.raw(0)
    ids = ids.reshape(ids.shape[0], -1)
    if ids.size and ids.min() < 0:
        raise hazard(ins, f"segment id {ids.min()} read from {ins.inputs[0].name!r} is negative; "
                          f"sequence_bounds takes non-negative ids (0 marks padding)")
    length = ids.shape[1]
    position = np.arange(length)
    first = np.ones(ids.shape, bool)
    first[:, 1:] = ids[:, 1:] != ids[:, :-1]
    last = np.ones(ids.shape, bool)
    last[:, :-1] = ids[:, :-1] != ids[:, 1:]
    starts = np.maximum.accumulate(np.where(first, position, 0), axis=1)
    ends = np.minimum.accumulate(np.where(last, position + 1, length)[:, ::-1], axis=1)[:, ::-1]
    padding = ids == 0
    bounds = np.stack([np.where(padding, length, starts), np.where(padding, -1, ends)], axis=1)
    io.write(0, bounds.astype(F32))


def _write_rows(view, rows: np.ndarray, values: np.ndarray) -> None:
    """Store values into some rows (partitions) of a view and mark only those rows written."""
    view.array()[rows] = values.astype(view.element.numpy)
    view.storage.shadow = None
    if view.storage.written is not None:
        view.written_mask()[rows] = True


@EXECUTE.register(Opcode.NONZERO_WITH_COUNT)
def _nonzero_with_count(ins: Instruction, io: Operands) -> None:
    """On the first partition of each GpSimd group: nonzero positions (+ index_offset), padding,
    then the count. Other partitions of dst keep their values."""
    data = io.raw(0)
    rows = np.arange(0, data.shape[0], ins.param("group_partitions"))
    flat = data.reshape(data.shape[0], -1)[rows]
    nonzero = flat != 0
    count = nonzero.sum(axis=1)
    order = np.argsort(~nonzero, axis=1, kind="stable")
    values = np.where(np.arange(flat.shape[1]) < count[:, None], order + ins.param("index_offset"),
                      ins.param("padding_val"))
    out = io.out(0)
    _write_rows(out, rows, np.concatenate([values, count[:, None]], axis=1).reshape((rows.size,) +
                                                                                    out.shape[1:]))


def _lane_words(ins: Instruction, state, words: int) -> np.ndarray:
    """The engine's state words per lane. They seed the core's generator, so they stay valid until
    the generator draws again; after that, fresh words are drawn and the generator is re-seeded."""
    engine = ins.engine.value
    saved = state.rng_words.get(engine)
    if saved is None or state.rng_snapshot != (engine, state.rng.bit_generator.state):
        saved = state.rng.integers(0, np.iinfo(np.uint32).max, (state.partitions, words), np.uint32,
                                   endpoint=True)
        _reseed(state, engine, saved)
    return saved


def _reseed(state, engine: str, words: np.ndarray) -> None:
    state.rng_words[engine] = words
    state.rng = np.random.default_rng(words.reshape(-1).astype(np.uint64))
    state.rng_snapshot = (engine, state.rng.bit_generator.state)


@EXECUTE.register(Opcode.RAND_SET_STATE)
def _rand_set_state(ins: Instruction, io: Operands) -> None:
    seeds = io.raw(0)
    seeds = seeds.reshape(seeds.shape[0], -1)
    first = ins.inputs[0].partition_start
    words = _lane_words(ins, io.state, seeds.shape[1]).copy()
    words[first:first + seeds.shape[0]] = seeds
    _reseed(io.state, ins.engine.value, words)


@EXECUTE.register(Opcode.RAND_GET_STATE)
def _rand_get_state(ins: Instruction, io: Operands) -> None:
    out = io.out(0)
    lanes = out.shape[0]
    first = ins.outputs[0].partition_start
    words = _lane_words(ins, io.state, int(np.prod(out.shape[1:])))
    io.write_raw(0, words[first:first + lanes].reshape(out.shape))


@EXECUTE.register(Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD)
def _register_set(ins: Instruction, io: Operands) -> None:
    if ins.opcode is Opcode.REGISTER_LOAD:
        loaded = io.raw(0).reshape(-1)[0]
        if not np.isfinite(loaded):
            raise hazard(ins, f"register_load reads {loaded} from {ins.inputs[0].name!r}; a register holds "
                              f"an integer")
        value = int(loaded)
    else:
        value = ins.param("value")
        if type(value) is RegisterRef:  # another register, read now
            value = io.state.registers.get(value.register, 0)
        value = int(value)
    io.state.registers[ins.param("register")] = value


@EXECUTE.register(Opcode.REGISTER_STORE)
def _register_store(ins: Instruction, io: Operands) -> None:
    value = io.state.registers.get(ins.param("register"), 0)  # a register never moved holds 0
    view = io.out(0)
    if view.element.numpy.kind in "iu":
        io.write_raw(0, saturated(np.full(view.shape, value, np.int64), view.element.numpy))
    else:
        io.write(0, np.full(view.shape, value, F32))


@EXECUTE.register(Opcode.CORE_BARRIER)
def _core_barrier(ins: Instruction, io: Operands) -> None:
    """Values do not change; the front end holds every core at the barrier."""
