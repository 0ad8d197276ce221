"""EXECUTE rules for data movement and the Tensor Engine: DMA, copies, memset, matmul, transpose."""

from __future__ import annotations

import numpy as np

from trnsim.core import alu
from trnsim.core.execute import EXECUTE, F32, Operands, accumulate_matmul, hazard, to_storage
from trnsim.core.execute_vector import INTEGER_EXACT
from trnsim.core.isa import Opcode
from trnsim.core.trace import Instruction


def _copy(io: Operands, src: int = 0, dst: int = 0) -> None:
    """Same dtype: the bits move unchanged; otherwise the value goes through fp32."""
    if io.inputs[src].element == io.outputs[dst].element:
        io.write_raw(dst, io.raw(src))
    else:
        io.write(dst, io.f32(src))


@EXECUTE.register(Opcode.DMA_COPY, Opcode.TENSOR_COPY, Opcode.SENDRECV)
def _dma_copy(ins: Instruction, io: Operands) -> None:
    if ins.param("indirect"):
        _indirect_copy(ins, io)
    elif ins.param("reduce_op"):
        # dma_compute: the DMA engine adds its sources in fp32 (scales are all 1.0)
        io.write(0, sum(io.f32(i).reshape(io.out(0).shape) for i in range(len(io.inputs))))
    else:
        _copy(io)


def _addresses(view, steps: np.ndarray, indirect_dim: int) -> np.ndarray:
    """Element addresses of an access pattern whose `indirect_dim` steps by index values."""
    address = np.full(view.shape, view.offset, np.int64)
    for axis, (count, stride) in enumerate(zip(view.shape, view.strides, strict=True)):
        shape = [1] * len(view.shape)
        shape[axis] = count
        positions = steps[:count] if axis == indirect_dim else np.arange(count)
        address = address + np.asarray(positions, np.int64).reshape(shape) * stride
    return address


def _indirect_copy(ins: Instruction, io: Operands) -> None:
    """DMA gather (indirect source) or scatter (indirect destination), copying or, with reduce_op
    (dma_compute's read-modify-write), adding into dst in fp32; oob_mode error or skip."""
    gather = ins.param("indirect") == "src"
    view = io.inputs[0] if gather else io.out(0)
    steps = io.raw(len(io.inputs) - 1).reshape(-1).astype(np.int64)
    flat = view.storage.values().view(view.element.numpy)
    address = _addresses(view, steps, ins.param("indirect_dim"))
    if ins.param("scalar_step") is not None:  # a scalar_offset tile's value shifts the whole pattern
        address = address + steps[0] * ins.param("scalar_step")
    valid = (address >= 0) & (address < flat.size)
    if not valid.all() and ins.param("oob_mode") != "skip":
        raise hazard(ins, f"indirect DMA reaches element {int(address[~valid].flat[0])} of "
                          f"{view.storage.name!r}, which has {flat.size}")
    if gather:
        _gather(io, flat[np.where(valid, address, 0)], valid, view, ins.param("reduce_op") == "add")
        return
    if ins.param("reduce_op") == "add":
        _scatter_add(ins, io, flat, address[valid], io.f32(0).reshape(address.shape)[valid], view)
    else:
        values = io.raw(0) if io.inputs[0].element == view.element else to_storage(io.f32(0), view.element)
        flat[address[valid]] = np.broadcast_to(values.reshape(address.shape), address.shape)[valid]
    view.storage.shadow = None
    if view.storage.written is not None:
        view.storage.written.view(np.bool_)[address[valid]] = True


def _gather(io: Operands, values: np.ndarray, valid: np.ndarray, view, adds: bool) -> None:
    """dst = the gathered elements (or, `adds`, dst + them in fp32); where the index was out of
    bounds and oob_mode is skip, dst keeps its value."""
    out = io.out(0)
    shape = out.shape  # the gathered view has dst's size (CHECK), not always its shape
    values, valid = values.reshape(shape), valid.reshape(shape)
    if adds:
        total = io.f32(1).reshape(shape) + values.astype(F32)
        io.write_raw(0, np.where(valid, to_storage(total, out.element), out.array()))
        return
    same = view.element == out.element
    current = out.array() if same else io.current(0)
    merged = np.where(valid, values if same else values.astype(F32), current)
    if same:
        io.write_raw(0, merged)
    else:
        io.write(0, merged)


def _scatter_add(ins: Instruction, io: Operands, flat: np.ndarray, targets: np.ndarray, addends: np.ndarray,
                 view) -> None:
    """flat[targets] += addends in fp32, rounded into the element's dtype. dma_compute requires unique
    indices (a repeated one would race on hardware: refused); the old API's atomic_rmw
    (unique_indices False) adds repeats one after another, in order."""
    written = view.storage.written
    if io.strict and written is not None and not written.view(np.bool_)[targets].all():
        raise hazard(ins, f"adds into elements of {view.storage!r} that were never written",
                     hint="initialise the tensor first")
    _, inverse, counts = np.unique(targets, return_inverse=True, return_counts=True)
    if counts.size < targets.size and ins.param("unique_indices") is not False:
        repeated = int(targets[np.flatnonzero(counts[inverse] > 1)[0]])
        raise hazard(ins, f"a read-modify-write reaches element {repeated} of {view.storage.name!r} more "
                          f"than once; dma_compute needs unique indices (unique_indices=True)",
                     hint="make the index tile's rows distinct, or reduce the repeated rows first")
    rank = np.empty(targets.size, np.int64)  # how many earlier positions hit the same element
    order = np.argsort(inverse, kind="stable")
    rank[order] = np.arange(targets.size) - np.repeat(np.cumsum(counts) - counts, counts)
    for step in range(int(counts.max(initial=0))):
        pick = rank == step
        hit = targets[pick]
        flat[hit] = to_storage(flat[hit].astype(F32) + addends[pick], view.element)


@EXECUTE.register(Opcode.DMA_TRANSPOSE)
def _dma_transpose(ins: Instruction, io: Operands) -> None:
    """A data move: the bits pass unchanged (CHECK refuses a dst dtype other than src's)."""
    io.write_raw(0, np.ascontiguousarray(np.transpose(io.raw(0), ins.param("axes"))))


@EXECUTE.register(Opcode.TRANSPOSE)
def _transpose(ins: Instruction, io: Operands) -> None:
    data = io.raw(0)
    flat = data.reshape(data.shape[0], -1)
    if io.inputs[0].element == io.outputs[0].element:
        io.write_raw(0, np.ascontiguousarray(flat.T))
    else:
        io.write(0, flat.T.astype(F32))


@EXECUTE.register(Opcode.MEMSET)
def _memset(ins: Instruction, io: Operands) -> None:
    view = io.out(0)
    value = ins.param("value")
    if _holds_exactly(view.element.numpy, value):  # integers past 2**24 keep every bit
        io.write_raw(0, np.full(view.shape, value, view.element.numpy))
    else:
        io.write(0, np.full(view.shape, value, F32))


def _holds_exactly(dtype: np.dtype, value) -> bool:
    """An integer destination that holds this integer value; anything else is cast as engines cast
    (round half to even, saturate)."""
    if dtype.kind not in "iu" or not float(value).is_integer():
        return False
    limits = np.iinfo(dtype)
    return limits.min <= value <= limits.max


@EXECUTE.register(Opcode.TENSOR_COPY_PREDICATED)
def _copy_predicated(ins: Instruction, io: Operands) -> None:
    """A copy under a predicate: between tiles of one dtype the bits pass, as in tensor_copy (int32
    above 2^24 came back rounded to fp32, and `nl.where` with it)."""
    current = io.current(0)
    keep = (io.f32(1).reshape(current.shape) != 0) ^ bool(ins.param("reverse_pred", False))
    if io.inputs[0].element == io.outputs[0].element:
        held = io.out(0).array()
        io.write_raw(0, np.where(keep.reshape(held.shape), io.raw(0).reshape(held.shape), held))
        return
    io.write(0, np.where(keep, io.f32(0).reshape(current.shape), current))


def _contraction_operands(ins: Instruction, io: Operands) -> tuple[np.ndarray, np.ndarray]:
    """Stationary and moving as [K, M] and [K, N] fp32 (double_row folds [K, 2, F] into 2K)."""
    stationary, moving = io.f32_reused(0), io.f32_reused(1)
    rows = stationary.shape[0]
    if ins.param("perf_mode") == "double_row":
        return stationary.reshape(2 * rows, -1), moving.reshape(2 * rows, -1)
    return stationary.reshape(rows, -1), moving.reshape(moving.shape[0], -1)


def _transpose_mode(io: Operands) -> None:
    """is_transpose (trn2+): the data to transpose is the stationary tile and moving is a 0/1
    identity-like tile (SDK Trainium2 architecture guide), so dst[m, n] = stationary[k_n, m] with
    k_n the row of moving's one in column n. Bits pass unchanged (NaN, Inf), cast if the dtypes
    differ. A moving tile that is not one-hot gets the ordinary fp32 product."""
    stationary = io.raw(0).reshape(io.inputs[0].shape[0], -1)
    moving = io.f32(1).reshape(io.inputs[1].shape[0], -1)
    ones = moving == 1
    if not (np.all(ones.sum(axis=0) == 1) and np.all(ones | (moving == 0))):
        io.write(0, stationary.astype(F32).T @ moving)
        return
    picked = stationary[ones.argmax(axis=0)].T  # [M, N]
    if picked.dtype == io.out(0).element.numpy:
        io.write_raw(0, np.ascontiguousarray(picked))
    else:
        io.write(0, picked.astype(F32))


def settled_gemm(ins: Instruction, inputs: tuple, outputs: tuple, state) -> tuple:
    """The `blas.gemm` arguments of an nc_matmul whose fp32 2-D PSUM region already holds matmul
    sums (a chain's later steps, core/deferred.py): `accumulate_matmul` would find every flag set
    and make exactly this call, so the flag scans and settling are skipped."""
    io = Operands(ins, inputs, outputs, state, False)
    return (*_contraction_operands(ins, io), io.out(0).array(), ins.param("accumulate") is not False)


@EXECUTE.register(Opcode.MATMUL)
def _matmul(ins: Instruction, io: Operands) -> None:
    """dst[M, N] = stationary[K, M].T @ moving[K, N], fp32 accumulate in PSUM."""
    if ins.param("is_transpose"):
        _transpose_mode(io)
        return
    accumulate_matmul(io, _contraction_operands(ins, io), ins.param("accumulate"))


@EXECUTE.register(Opcode.COLLECTIVE)
def _collective(ins: Instruction, io: Operands) -> None:
    """The group's result from what every rank of it sent (`received`: per rank of `group`, in its
    order, the stored values of each src; for permute only the sender's). Reductions run in group
    order (`fold`), so every rank and every launch mode computes the same bits."""
    kind, received = ins.param("collective"), ins.param("received")
    if kind == "permute":
        if received:  # no rank sends to this one: dst keeps its values
            for index, values in enumerate(received[0]):
                if values.dtype == io.out(index).storage.data.dtype:
                    io.write_raw(index, values)
                else:  # permute_implicit_reduce sends fp32 sums: rounded into dst's dtype
                    io.write(index, values.reshape(io.out(index).shape))
        return
    if kind.endswith("_v"):
        _variable_collective(ins, io)
        return
    me, ranks = ins.param("group").index(ins.param("rank")), len(received)
    dim = ins.param("collective_dim") or 0
    for index in range(len(io.outputs)):
        shape = io.inputs[index].shape
        parts = [np.asarray(sent[index]).reshape(shape) for sent in received]
        if kind == "all_gather":
            io.write_raw(index, np.concatenate(parts, axis=dim))
        elif kind == "all_to_all":
            io.write_raw(index, np.concatenate([np.split(p, ranks, axis=dim)[me] for p in parts], axis=dim))
        else:
            blocks = parts if kind == "all_reduce" else [np.split(p, ranks, axis=dim)[me] for p in parts]
            total = fold(ins.param("op"), blocks, io.out(index).element.numpy)
            if total.dtype == F32:  # rounded into dst's dtype
                io.write(index, total.reshape(io.out(index).shape))
            else:  # exact integers, already wrapped into dst's dtype
                io.write_raw(index, total)


def fold(op: str, blocks, dtype: np.dtype) -> np.ndarray:
    """`op` over same-shape `blocks`, one at a time in order, for a destination of `dtype`. When the
    blocks and the destination are all int32/uint32, add, max and min run in native integer
    arithmetic and wrap into `dtype`, as tensor_tensor does (INTEGER_EXACT); else in fp32."""
    exact = op in INTEGER_EXACT and all(np.dtype(d) in _INT32 for d in (dtype, *(b.dtype for b in blocks)))
    total = blocks[0].astype(np.int64 if exact else F32)
    for block in blocks[1:]:
        total = alu.reduce(op, np.stack([total, block.astype(total.dtype)]), axis=0)
    return total.astype(dtype) if exact else total


_INT32 = (np.dtype(np.int32), np.dtype(np.uint32))


def _variable_collective(ins: Instruction, io: Operands) -> None:
    """all_gather_v / all_to_all_v: the chunk each rank of the group sent this one (flat elements)
    lands at `recv_displs`; output 1, when present, is the metadata's recv_counts row."""
    flat = np.array(io.out(0).array()).reshape(-1)
    chunks = list(zip(ins.param("received"), ins.param("recv_displs"), strict=True))
    for sender, (chunk, displ) in enumerate(chunks):
        if not 0 <= displ <= flat.size - chunk.size:
            raise hazard(ins, f"the {chunk.size} elements from rank {ins.param('group')[sender]} at offset "
                         f"{displ} do not fit dst's {flat.size}", hint="check the metadata's counts")
    for chunk, displ in chunks:
        flat[displ:displ + chunk.size] = chunk
    io.write_raw(0, flat)
    counts = [chunk.size for chunk, _ in chunks]
    if len(io.outputs) > 1:
        io.write_raw(1, np.array(counts, io.out(1).array().dtype))
