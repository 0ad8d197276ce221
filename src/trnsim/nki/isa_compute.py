"""`nki.isa` compute instructions: Scalar, Vector and GpSimd engines, RNG, and LNC exchange."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from trnsim.core.isa import Memory, Opcode
from trnsim.errors import ArgumentError, KernelError, ShapeError, SourceLoc, UnsupportedError
from trnsim.nki import backend, calls
from trnsim.nki.isa import (
    _enum_value,
    _Inputs,
    _ints,
    _issue,
    _number,
    _pattern,
    _register_operand,
    engine,
    oob_mode,
    op_name,
    reduce_cmd,
    tensor_copy,
)
from trnsim.nki.tensor import IndirectTensor, NkiTensor

_IDLE, _RESET_REDUCE = reduce_cmd.idle, reduce_cmd.reset_reduce


def _reduce_params(reduce_op, reduce_cmd_value) -> dict:
    return {"reduce_op": op_name(reduce_op) if reduce_op is not None else "add",
            "reduce_cmd": _enum_value(reduce_cmd_value)}


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=_IDLE,
               name=None):
    """dst = op(data * scale + bias); with reduce_res, also a reduction along the free dims."""
    srcs = _Inputs([data])
    params = {"op": op_name(op), "bias": srcs.ref(bias), "scale": srcs.ref(scale),
              **_reduce_params(reduce_op, reduce_cmd)}
    return _issue(Opcode.ACTIVATION, (dst, reduce_res), srcs, params, None, name)


def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False,
              reduce_op=None, reduce_res=None, reduce_cmd=_IDLE, name=None):
    """trn3: dst = op((data op0 imm0) op1 imm1) (op may be nl.prelu with relu_param), then an
    optional reduction as in activation."""
    srcs = _Inputs([data])  # op0/op1 are trn3 parameters of ACTIVATION: the contract refuses them before
    params = {"op": op_name(op), "op0": op_name(op0), "imm0": srcs.ref(imm0), "reverse0": reverse0,
              "op1": op_name(op1), "imm1": srcs.ref(imm1), "reverse1": reverse1,
              "relu_param": srcs.ref(relu_param), **_reduce_params(reduce_op, reduce_cmd)}
    return _issue(Opcode.ACTIVATION, (dst, reduce_res), srcs, params, None, name)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    srcs = _Inputs([data])
    params = {"op": op_name(op), "bias": srcs.ref(bias), "scale": srcs.ref(scale),
              **_reduce_params(reduce_op, _RESET_REDUCE)}
    return _issue(Opcode.ACTIVATION_REDUCE, (dst, reduce_res), srcs, params, None, name)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    tiles = [t for t in (dst, data1, data2) if isinstance(t, NkiTensor)]
    if getattr(engine, "value", engine) in (None, "unknown") and tiles and all(
            str(t.dtype) in ("int32", "uint32") and t.storage.memory is not Memory.PSUM for t in tiles):
        engine = "gpsimd"  # nki.isa: all-int32 tensor_tensor defaults to GpSimd (native integers),
        # unless a tile is in PSUM, which GpSimd cannot reach: then Vector, in fp32
    return _issue(Opcode.TENSOR_TENSOR, dst, [data1, data2], {"op": op_name(op)}, engine, name)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    srcs = _Inputs([data])
    params = {"op0": op_name(op0), "operand0": srcs.ref(operand0), "reverse0": reverse0,
              "op1": op_name(op1), "operand1": srcs.ref(operand1), "reverse1": reverse1}
    return _issue(Opcode.TENSOR_SCALAR, dst, srcs, params, engine, name)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    srcs = _Inputs([data])
    params = {"op0": op_name(op0), "operand0": srcs.ref(operand0), "reverse0": reverse0,
              "op1": op_name(op1), "operand1": srcs.ref(operand1), "reverse1": reverse1}
    return _issue(Opcode.SCALAR_TENSOR_TENSOR, dst, srcs, params, None, name)


def _reduce_axes(axis, data) -> tuple[int, ...]:
    """The reduced axes as dim indices 0..rank-1 (negative ones count from the end, NKI >= 0.3);
    an axis outside the tile is refused, never wrapped. The CHECK rule relates them to dst."""
    rank = len(data.shape)
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    if not all(isinstance(a, Integral) and not isinstance(a, bool) for a in axes):
        return axis  # not integers: the contract check names the argument
    outside = [int(a) for a in axes if not -rank <= a < rank]
    if outside:
        raise ShapeError(f"axis={axis!r}: {outside[0]} is not a dim of the {rank}-D tile {list(data.shape)}",
                         op="nisa.tensor_reduce", hint=f"dims are 1..{rank - 1} (0 is the partition dim)")
    return tuple(sorted({int(a) % rank for a in axes}))


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    axes = _reduce_axes(axis, data)
    params = {"op": op_name(op), "axis": axes, "negate": negate, "keepdims": keepdims}
    return _issue(Opcode.TENSOR_REDUCE, dst, [data], params, None, name)


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=_RESET_REDUCE, reduce_init=None, reduce_res_negate=False, name=None):
    srcs = _Inputs([data])
    params = {"op0": op_name(op0), "operand0": srcs.ref(operand0), "reverse0": reverse0,
              "reduce_res_negate": reduce_res_negate, **_reduce_params(reduce_op, reduce_cmd),
              "reduce_init": srcs.ref(reduce_init)}
    return _issue(Opcode.TENSOR_SCALAR_REDUCE, (dst, reduce_res), srcs, params, None, name)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """r[t] = (data0[t] op0 r[t-1]) op1 data1[t], starting from `initial`."""
    srcs = _Inputs([data0, data1])
    params = {"initial": srcs.ref(initial), "op0": op_name(op0), "op1": op_name(op1),
              "reverse0": reverse0, "reverse1": reverse1}
    return _issue(Opcode.TENSOR_TENSOR_SCAN, dst, srcs, params, None, name)


_CUMULATIVE_START = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": float("-inf"),
                     "minimum": float("inf")}


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=_RESET_REDUCE, name=None):
    """reg = op1(src[i] op0 imm0, reg); dst[i] = reg along the free dims (a scan on the Vector engine);
    imm0 is a number or a [P, 1] tile. reg starts at op1's identity (reset_reduce), at imm1 (a number
    or a [P, 1] tile: load_reduce) or where the engine's accumulator was left (reduce), and the scan's
    last value stays in the accumulator."""
    combine, command = op_name(op1), _enum_value(reduce_cmd)
    if not isinstance(combine, str) or combine not in _CUMULATIVE_START:
        raise UnsupportedError(f"tensor_scalar_cumulative op1={combine}; it takes "
                               f"{sorted(_CUMULATIVE_START)}", what="nisa.tensor_scalar_cumulative")
    if not calls.is_tile_or_number(imm0):
        raise ArgumentError(f"imm0={imm0!r}; it must be a number or a [P, 1] tile",
                            op="nisa.tensor_scalar_cumulative")
    if command == "load_reduce" and not calls.is_tile_or_number(imm1):
        raise ArgumentError(f"imm1={imm1!r}; load_reduce starts from imm1, a number or a [P, 1] tile",
                            op="nisa.tensor_scalar_cumulative")
    srcs = _Inputs([src, src])  # the scan's data0 and data1 (op1 bypass ignores data1)
    start = srcs.ref(imm1) if command == "load_reduce" else _CUMULATIVE_START[combine]
    params = {"initial": start, "op0": combine, "op1": "bypass", "pre_op": op_name(op0),
              "pre_operand": srcs.ref(imm0), "pre_reverse": False, "reduce_cmd": command}
    return _issue(Opcode.TENSOR_TENSOR_SCAN, dst, srcs, params, None, name)


def tensor_partition_reduce(dst, op, data, name=None):
    return _issue(Opcode.TENSOR_PARTITION_REDUCE, dst, [data], {"op": op_name(op)}, None, name)


def bn_stats(dst, data, name=None):
    return _issue(Opcode.BN_STATS, dst, [data], {}, None, name)


def bn_aggr(dst, data, name=None):
    return _issue(Opcode.BN_AGGR, dst, [data], {}, None, name)


def reciprocal(dst, data, name=None):
    return _issue(Opcode.RECIPROCAL, dst, [data], {}, None, name)


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=_IDLE, reduce_init=0.0, name=None):
    srcs = _Inputs([src])
    loads = _enum_value(reduce_cmd) == "load_reduce"  # else 0.0, the default, means unset
    params = {"max_value": srcs.ref(max_value), **_reduce_params("add", reduce_cmd),
              "reduce_init": srcs.ref(reduce_init) if loads or not _is_zero(reduce_init) else None}
    return _issue(Opcode.EXPONENTIAL, (dst, reduce_res), srcs, params, None, name)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op="equal", offset=0,
                  name=None):
    """Keep on_true_tile where cmp_op(offset + channel_multiplier*p + pattern . i, 0), else the value."""
    params = {"pattern": _pattern(pattern), "channel_multiplier": channel_multiplier,
              "on_false_value": _number(on_false_value), "cmp_op": op_name(cmp_op),
              "offset": _register_operand(offset)}
    return _issue(Opcode.AFFINE_SELECT, dst, [on_true_tile], params, None, name)


def _is_zero(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and value == 0


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=_RESET_REDUCE,
                 reduce_res=None, reduce_op="maximum", range_start=0, on_false_value=-3.4028235e38,
                 name=None):
    srcs = _Inputs([on_true_tile])
    params = {"comp_op0": op_name(comp_op0), "comp_op1": op_name(comp_op1), "bound0": srcs.ref(bound0),
              "bound1": srcs.ref(bound1), "range_start": range_start,
              "on_false_value": _number(on_false_value),
              **_reduce_params(reduce_op, reduce_cmd)}
    return _issue(Opcode.RANGE_SELECT, (dst, reduce_res), srcs, params, None, name)


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=_IDLE, reduce_op="maximum",
                  reverse_pred=False, name=None):
    srcs = _Inputs([predicate, on_true])
    params = {"on_false": srcs.ref(on_false), "reverse_pred": reverse_pred,
              **_reduce_params(reduce_op, reduce_cmd)}
    return _issue(Opcode.SELECT_REDUCE, (dst, reduce_res), srcs, params, None, name)


def max8(dst, src, name=None):
    return _issue(Opcode.MAX8, dst, [src], {}, None, name)


def nc_find_index8(dst, data, vals, name=None):
    return _issue(Opcode.FIND_INDEX8, dst, [data, vals], {}, None, name)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    return _issue(Opcode.MATCH_REPLACE8, (dst, dst_idx), [data, vals], {"imm": _number(imm)}, None, name)


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    return _issue(Opcode.STREAM_SHUFFLE, dst, [src], {"shuffle_mask": _ints(shuffle_mask)},
                  None, name)


def nc_n_gather(dst, data, indices, name=None):
    return _issue(Opcode.N_GATHER, dst, [data, indices], {}, None, name)


def rng(dst, engine=engine.vector, name=None):
    return _issue(Opcode.RNG, dst, [], {}, engine, name)


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, name=None):
    """dst = srcs[0] + srcs[1] + ... computed in fp32 by the DMA engines (only add, scales 1.0). With a
    vector_offset source or dst, a read-modify-write: a gather (dst in SBUF += HBM rows picked by an
    index tile) or a scatter (HBM rows picked by an index tile += an SBUF tile)."""
    numbers = isinstance(scales, tuple | list) and all(isinstance(s, Real) for s in scales)
    if scales is not None and not numbers:
        raise ArgumentError(f"scales={scales!r}; it must be a list of numbers, one per source")
    adds = isinstance(op_name(reduce_op), str) and op_name(reduce_op) == "add"
    if not adds or any(float(s) != 1.0 for s in (scales or ())):
        raise UnsupportedError(f"dma_compute supports reduce_op=add with scales of 1.0, not "
                               f"{op_name(reduce_op)} / {scales}", what="nisa.dma_compute")
    if not isinstance(srcs, tuple | list):
        raise ArgumentError(f"srcs={srcs!r}; give a list of source tensors")
    if any(isinstance(view, IndirectTensor) for view in (dst, *srcs)):
        return _read_modify_write(dst, list(srcs), unique_indices, oob_mode, name)
    return _issue(Opcode.DMA_COPY, dst, list(srcs), {"reduce_op": "add", "queue": None}, "dma", name)


def _read_modify_write(dst, srcs: list, unique_indices, mode, name):
    """dma_compute with vector_offset, under the rules nki.isa.dma_compute states: two sources, one
    of them the dst access itself; a scatter's dst and a gather's other source are HBM rows picked
    by an index tile, the remaining operand is in SBUF; indices unique."""
    if len(srcs) != 2:
        raise ArgumentError(f"a read-modify-write (a vector_offset operand) takes exactly 2 srcs, not "
                            f"{len(srcs)}", op="nisa.dma_compute")
    for index, view in enumerate(srcs):
        if not isinstance(view, NkiTensor):
            raise ArgumentError(f"srcs[{index}] is {calls.describe(view)}; it must be a tile (an nl.ndarray "
                                f"or a view of one)", op="nisa.dma_compute")
    if not isinstance(unique_indices, bool):
        raise ArgumentError(f"unique_indices={unique_indices!r}; it is True or False", op="nisa.dma_compute")
    if not unique_indices:
        raise UnsupportedError("dma_compute with vector_offset requires unique_indices=True (NKI: non-unique "
                               "indices are not supported yet)", what="nisa.dma_compute unique_indices=False")
    scatter = isinstance(dst, IndirectTensor)
    indirect = dst if scatter else next(view for view in srcs if isinstance(view, IndirectTensor))
    if indirect.scalar_step is not None:
        raise UnsupportedError("dma_compute with a scalar_offset operand: its addresses must be known when "
                               "compiling unless it uses vector_offset",
                               what="nisa.dma_compute scalar_offset")
    same = [view for view in srcs if _same_access(view, dst)]
    others = [view for view in srcs if not _same_access(view, dst)]
    if len(same) != 1 or len(others) != 1:
        raise ArgumentError("a read-modify-write needs one source that is dst's own access and one that is "
                            "not", op="nisa.dma_compute", hint="srcs=[dst, data] (scatter) or [dst, hbm.ap("
                            "..., vector_offset=...)] (gather)")
    data = others[0]
    hbm, sbuf = (dst, data) if scatter else (data, dst)
    if not isinstance(hbm, IndirectTensor) or hbm.storage.memory is not Memory.HBM:
        raise ArgumentError(f"the vector_offset access {hbm.name!r} must be in HBM", op="nisa.dma_compute")
    if isinstance(sbuf, IndirectTensor) or sbuf.storage.memory is not Memory.SBUF:
        raise ArgumentError(f"a {'scatter' if scatter else 'gather'} read-modify-write's "
                            f"{'source' if scatter else 'dst'} {sbuf.name!r} must be an SBUF tile",
                            op="nisa.dma_compute")
    return _rmw_copy(dst, data, unique=True, oob=mode, name=name)


def _same_access(view, dst) -> bool:
    """Whether `view` is dst's own access: the same elements, and for an indirect one the same index tile."""
    if not isinstance(view, NkiTensor) or not isinstance(dst, NkiTensor):
        return False
    fields = ("storage", "offset", "shape", "strides", "element")
    if any(getattr(view, field) != getattr(dst, field) for field in fields):
        return False
    if isinstance(dst, IndirectTensor) or isinstance(view, IndirectTensor):
        return (isinstance(view, IndirectTensor) and isinstance(dst, IndirectTensor)
                and view.index is dst.index and view.indirect_dim == dst.indirect_dim)
    return True


def _rmw_copy(dst, data, unique: bool, oob, name=None):
    """One DMA that adds `data` into dst in fp32 through a vector_offset access (dst's, a scatter, or
    data's, a gather). `unique`: repeated indices are a hazard (NKI's rule for dma_compute); else
    they add one after another (the old API's atomic_rmw)."""
    indirect, role = (dst, "dst") if isinstance(dst, IndirectTensor) else (data, "src")
    params = {"reduce_op": "add", "queue": None, "oob_mode": _enum_value(oob), "indirect": role,
              "indirect_dim": indirect.indirect_dim, "scalar_step": None, "unique_indices": unique}
    srcs = [data] if role == "dst" else [data, dst]
    return _issue(Opcode.DMA_COPY, dst, [*srcs, indirect.index], params, "dma", name)


def topk(val_dst, idx_dst, src, n, name=None):
    """The n largest values of each partition (descending) and their uint32 indices, found 8 at a
    time with max8 + nc_match_replace8, as hardware top-k kernels do (ties: see nc_match_replace8)."""
    from trnsim.nki.dtypes import SBUF
    partitions = src.shape[0]
    work = backend.new_tensor((partitions, src.size // partitions), "float32", SBUF, "topk_work")
    tensor_copy(dst=work, src=src.reshape((partitions, src.size // partitions)))
    for start in range(0, n, 8):
        count = min(8, n - start)
        values = backend.new_tensor((partitions, 8), "float32", SBUF, "topk_values")
        index = backend.new_tensor((partitions, 8), "uint32", SBUF, "topk_index")
        max8(dst=values, src=work)
        nc_match_replace8(dst=work, data=work, vals=values, imm=-3.4028235e38, dst_idx=index)
        tensor_copy(dst=val_dst[:, start:start + count], src=values[:, 0:count])
        tensor_copy(dst=idx_dst[:, start:start + count], src=index[:, 0:count])
    return val_dst


def rand2(dst, min, max, name=None):  # noqa: A002 - NKI's argument names
    """Uniform random values in [min, max) (trn3)."""
    return _issue(Opcode.RNG, dst, [], {"low": _number(min), "high": _number(max)}, None, name)


def dropout(dst, data, prob, name=None):
    srcs = _Inputs([data])
    return _issue(Opcode.DROPOUT, dst, srcs, {"prob": srcs.ref(prob)}, None, name)


def set_rng_seed(src_seeds, name=None):
    """Re-seed this core's generator from a [1,1] tensor (simulate) or a Python int."""
    running = backend.core()
    if not isinstance(src_seeds, NkiTensor) and not (isinstance(src_seeds, Integral) and src_seeds >= 0):
        raise ArgumentError(f"src_seeds={src_seeds!r}; it must be a non-negative integer or a [1, 1] tile")
    if isinstance(src_seeds, NkiTensor):  # the limits the nki.isa.set_rng_seed docstring states
        if tuple(src_seeds.shape) != (1, 1):
            raise ShapeError(f"src_seeds has shape {list(src_seeds.shape)}; the seed is a [1, 1] tile",
                             op="nisa.set_rng_seed")
        if src_seeds.storage.memory not in (Memory.SBUF, Memory.PSUM):
            raise ArgumentError(f"src_seeds is in {src_seeds.storage.memory.value}; the seed is read from "
                                f"SBUF or PSUM", op="nisa.set_rng_seed", hint="copy it on chip first")
        if src_seeds.element.numpy.itemsize != 4:
            raise ArgumentError(f"src_seeds is {src_seeds.dtype}; the seed is a 32-bit value",
                                op="nisa.set_rng_seed")
    if running.with_values:
        if hasattr(src_seeds, "array"):
            seed = int(np.asarray(src_seeds.array()).reshape(-1)[0])
        else:
            seed = int(src_seeds)
        running.state.rng = np.random.default_rng(seed)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """Exchange tiles between the two cores of an LNC=2 launch (a DMA into the peer's memory)."""
    from trnsim.nki.lnc import exchange
    exchange(src, dst, _whole(send_to_rank, "sendrecv", "send_to_rank"),
             _whole(recv_from_rank, "sendrecv", "recv_from_rank"), _whole(pipe_id, "sendrecv", "pipe_id"))
    return dst


def core_barrier(data=None, cores=None, engine=engine.gpsimd, name=None):
    from trnsim.nki.lnc import barrier
    barrier()
    return data


def _whole(value, op: str, argument: str) -> int:
    """An integer immediate of an instruction; anything else is the kernel's mistake."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise KernelError(f"{argument} must be an integer, not {value!r}", op=f"nisa.{op}",
                          where=SourceLoc.of_caller())
    return int(value)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Gather inside each GpSimd partition group: every partition of a group reads the group's
    uint16 indices (flattened partition-first; element offsets into its own flattened row),
    num_elem_per_idx contiguous elements per index, the first num_valid_indices of them."""
    group = backend.core().spec.gpsimd_group_partitions
    per_group = index.size // max(1, index.shape[0] // group)
    valid = per_group
    if num_valid_indices is not None:
        valid = _whole(num_valid_indices, "local_gather", "num_valid_indices")
    params = {"num_elem_per_idx": _whole(num_elem_per_idx, "local_gather", "num_elem_per_idx"),
              "num_valid_indices": valid,
              "group_partitions": group}
    return _issue(Opcode.LOCAL_GATHER, dst, [src_buffer, index], params, None, name)


def sequence_bounds(dst, segment_ids, name=None):
    """dst[0, 0, i] / dst[0, 1, i]: start and end (exclusive) of the run of equal ids holding i;
    padding (id 0) gets n and -1. segment_ids is [1, n]; dst is [1, 2, n]."""
    return _issue(Opcode.SEQUENCE_BOUNDS, dst, [segment_ids], {}, None, name)


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """On partitions 0, 16, 32, ... (one per GpSimd core): positions of the nonzero elements plus
    index_offset, then padding_val, then the count in the extra last element (trn2+)."""
    group = backend.core().spec.gpsimd_group_partitions
    params = {"index_offset": _whole(index_offset, "nonzero_with_count", "index_offset"),
              "padding_val": _whole(padding_val, "nonzero_with_count", "padding_val"),
              "group_partitions": group}
    return _issue(Opcode.NONZERO_WITH_COUNT, dst, [src], params, None, name)


def rand_set_state(src_seeds, engine=engine.gpsimd, name=None):
    """Load the engine's PRNG state words ([P, words] uint32, one row per lane) (trn2+)."""
    backend.issue(Opcode.RAND_SET_STATE, (), (src_seeds,), {}, engine, name or "")


def rand_get_state(dst, engine=engine.gpsimd, name=None):
    """Store the engine's PRNG state words; loading them back with rand_set_state replays the
    random numbers drawn since (trn2+)."""
    return _issue(Opcode.RAND_GET_STATE, dst, [], {}, engine, name)
