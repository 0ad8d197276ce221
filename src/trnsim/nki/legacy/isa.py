"""`neuronxcc.nki.isa` (old nisa): operands positional or by name, results returned as new tiles.

Each call allocates the result the old compiler would have (SBUF; PSUM for the Tensor engine)
and issues the 0.6 instruction on it. `nc_matmul` returns a pending result: added to a PSUM
tile (`psum += nisa.nc_matmul(...)`) or assigned into one it accumulates there, as the hardware
does; used any other way it is computed into a PSUM tile of its own.
"""

from __future__ import annotations

import math

import numpy as np

from trnsim.errors import ShapeError
from trnsim.nki import calls, dtypes
from trnsim.nki import isa as nisa06
from trnsim.nki.isa import (  # noqa: F401 - enums and queries the old nisa shares
    _default_transpose_axes,
    dge_mode,
    engine,
    get_nc_version,
    nc_version,
    oob_mode,
    reduce_cmd,
)
from trnsim.nki.legacy.index import IndexExpr
from trnsim.nki.legacy.language import _add_into, _copy_into, _plain, _whole_mask
from trnsim.nki.legacy.operands import ARGUMENTS as _ARGUMENTS
from trnsim.nki.legacy.operands import HELPERS as _HELPERS
from trnsim.nki.legacy.operands import Call, PendingMatmul
from trnsim.nki.legacy.operands import in_sbuf as _in_sbuf
from trnsim.nki.legacy.operands import is_tile as _is_tile
from trnsim.nki.legacy.operands import new_tile as _new_tile
from trnsim.nki.legacy.operands import result_dtype as _result_dtype
from trnsim.nki.legacy.tile import Tile
from trnsim.nki.legacy.tile import affine_steps as _affine_steps

tensor_engine, vector_engine = engine.tensor, engine.vector
scalar_engine, gpsimd_engine = engine.scalar, engine.gpsimd
unknown_engine = engine.unknown


_PERF_MODES = {"double_row_gen3": "double_row"}
"""The old API's names for matmul perf modes the 0.6 API names otherwise."""


def nc_matmul(stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), mask=None, perf_mode="none") -> Tile:
    """stationary[K, M].T @ moving[K, N] -> PSUM [M, N] fp32."""
    _whole_mask(mask, [], "nisa.nc_matmul")
    params = {"is_stationary_onezero": is_stationary_onezero, "is_moving_onezero": is_moving_onezero,
              "is_transpose": is_transpose, "tile_position": tile_position, "tile_size": tile_size,
              "perf_mode": _PERF_MODES.get(getattr(perf_mode, "value", perf_mode), perf_mode)}
    return Tile(None, pending=PendingMatmul(_plain(stationary), _plain(moving), params))


_OP_NAMES = {"max": "maximum", "amax": "maximum", "min": "minimum", "amin": "minimum", "sum": "add"}
"""numpy reductions old kernels pass as operators (op=np.max), by their ALU names."""


def _op(op):
    name = getattr(op, "__name__", None)
    return _OP_NAMES.get(name, op) if isinstance(name, str) else op


def _compute(function, data, dtype, mask, shape=None, buffer=None, columns=(), **operands) -> Tile:
    """Issue `function(dst=..., data=..., **operands)` into a new tile over the call's iterations.
    `columns` names operands that are per-partition scalars ([P, 1] tiles or numbers)."""
    call = Call([data], mask) if shape is None else Call([], _checked_mask(mask, data), shape)
    tile, dst = call.output(_result_dtype(dtype, data), buffer)
    if call.empty:
        return tile
    views = {name: (call.column(v) if name in columns else call.operand(v)) if _is_tile(v) else _op(v)
             for name, v in operands.items()}
    if data is not None:
        views["data"] = call.operand(data) if shape is None else _plain(data)
    function(dst=dst, **views)
    return tile


def _checked_mask(mask, data):
    _whole_mask(mask, [data] if data is not None else [], "this nisa call")
    return None


def _rectangle(function, data, dtype, mask, shape, place, buffer=None, **params) -> Tile:
    """A call whose result has a shape of its own (`shape`): with a mask that keeps a rectangle of
    `data`, it runs on that rectangle and writes the part of the result `place(box, kept)` names
    (the mask's box and the rectangle's view); without one, as `_compute` runs it."""
    call = Call([data], mask)
    if call.box is None or call.empty:
        return _compute(function, data, dtype, mask, shape=shape, buffer=buffer, **params)
    kept = call.view(data, broadcast=False)
    tile = _new_tile(shape, _result_dtype(dtype, data), buffer)
    function(dst=tile.base[place(call.box, kept)], data=kept, **{k: _op(v) for k, v in params.items()})
    return tile


def activation(op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None) -> Tile:
    return _compute(nisa06.activation, data, dtype, mask, columns=("bias", "scale", "reduce_res"), op=op,
                    bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=_plain(reduce_res),
                    reduce_cmd=reduce_cmd)


def activation_reduce(op, data, reduce_op, reduce_res, bias=None, scale=1.0, mask=None,
                      dtype=None) -> Tile:
    return _compute(nisa06.activation_reduce, data, dtype, mask, columns=("bias", "scale", "reduce_res"),
                    op=op, reduce_op=reduce_op, reduce_res=_plain(reduce_res), bias=bias, scale=scale)


def tensor_tensor(data1, data2, op, dtype=None, mask=None, engine=engine.unknown) -> Tile:
    call = Call([data1, data2], mask)
    tile, dst = call.output(_result_dtype(dtype, data1, data2))
    if not call.empty:
        nisa06.tensor_tensor(dst=dst, data1=call.operand(data1), data2=call.operand(data2), op=_op(op),
                             engine=engine)
    return tile


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, dtype=None,
                  mask=None, engine=engine.unknown) -> Tile:
    return _compute(nisa06.tensor_scalar, data, dtype, mask, columns=("operand0", "operand1"), op0=op0,
                    operand0=operand0, reverse0=reverse0, op1=op1, operand1=operand1, reverse1=reverse1,
                    engine=engine)


def tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None,
                         mask=None) -> Tile:
    return _compute(nisa06.tensor_scalar_reduce, data, dtype, mask, columns=("operand0", "reduce_res"),
                    op0=op0, operand0=operand0, reduce_op=reduce_op, reduce_res=_plain(reduce_res),
                    reverse0=reverse0)


def scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None) -> Tile:
    return _compute(nisa06.scalar_tensor_tensor, data, dtype, mask, columns=("operand0",), op0=op0,
                    operand0=operand0, op1=op1, operand1=operand1, reverse0=reverse0, reverse1=reverse1)


def tensor_copy(src, mask=None, dtype=None, engine=engine.unknown) -> Tile:
    call = Call([src], mask)
    tile, dst = call.output(_result_dtype(dtype, src))
    if not call.empty:
        nisa06.tensor_copy(dst=dst, src=call.view(src), engine=engine)
    return tile


def tensor_copy_dynamic_src(src, mask=None, dtype=None, engine=engine.unknown) -> Tile:
    """A copy whose source index holds a runtime offset (`t[ix, offsets[0, i] + iy]`)."""
    return tensor_copy(src, mask=mask, dtype=dtype, engine=engine)


def tensor_copy_dynamic_dst(dst, src, mask=None, dtype=None, engine=engine.unknown):
    """A copy whose destination index holds a runtime offset."""
    call = Call([dst], mask)
    if not call.empty:
        nisa06.tensor_copy(dst=call.view(dst, broadcast=False), src=call.source(src), engine=engine)
    return dst


def reciprocal(data, dtype=None, mask=None) -> Tile:
    return _compute(nisa06.reciprocal, data, dtype, mask)


def dropout(data, prob, mask=None, dtype=None) -> Tile:
    """dropout keeps data's dtype, so another `dtype` (documented as a cast) is a copy after it."""
    dropped = _compute(nisa06.dropout, data, None, mask, columns=("prob",), prob=prob)
    if _result_dtype(dtype, data) == dropped.dtype:
        return dropped
    return tensor_copy(dropped, mask=mask, dtype=dtype)


def tensor_reduce(op, data, axis, mask=None, dtype=None, negate=False, keepdims=False) -> Tile:
    axes = tuple(a % len(data.shape) for a in (axis if isinstance(axis, tuple | list) else (axis,)))
    keepdims = keepdims or len(axes) == len(data.shape) - 1  # a tile keeps a free dim: [P] is [P, 1]
    shape = [1 if d in axes else s for d, s in enumerate(data.shape) if keepdims or d not in axes]

    def place(box, kept):  # the rows and kept columns the mask's rectangle covers
        return tuple(slice(0, 1) if d in axes else box[d] for d in range(len(data.shape))
                     if keepdims or d not in axes)
    return _rectangle(nisa06.tensor_reduce, data, dtype, mask, tuple(shape), place, op=op, axis=axis,
                      negate=negate, keepdims=keepdims)


def tensor_partition_reduce(op, data, mask=None, dtype=None) -> Tile:
    return _compute(nisa06.tensor_partition_reduce, data, dtype, mask, shape=(1, *data.shape[1:]), op=op)


def bn_stats(data, mask=None, dtype=None) -> Tile:
    """Six statistics per chunk of up to bn_stats_fmax elements of each partition. A mask (the SDK's
    layernorm v2 masks the last, partial chunk of a row) keeps a rectangle: the statistics are
    those of its elements, in its rows of the result."""
    from trnsim.nki.language import tile_size

    def chunks(view) -> int:
        return -(-math.prod(view.shape[1:]) // tile_size.bn_stats_fmax)
    return _rectangle(nisa06.bn_stats, data, dtype, mask, (data.shape[0], 6 * chunks(data)),
                      lambda box, kept: (box[0], slice(0, 6 * chunks(kept))))


def bn_aggr(data, mask=None, dtype=None) -> Tile:
    return _compute(nisa06.bn_aggr, data, dtype, mask, shape=(data.shape[0], 2))


def max8(src, mask=None, dtype=None) -> Tile:
    """The 8 largest values of each partition (of the masked columns, with a mask)."""
    call = Call([src], mask)
    tile = _new_tile((src.shape[0], 8), _result_dtype(dtype, src))
    if not call.empty:
        nisa06.max8(dst=tile.base[_rows(call)], src=call.operand(src))
    return tile


def nc_find_index8(data, vals, mask=None, dtype=None) -> Tile:
    """Where each of vals' 8 values first occurs in each partition of data (with a mask, in the
    rectangle of data it keeps: its rows get their indices, counted within its columns)."""
    call = Call([data], mask)
    tile = _new_tile((data.shape[0], 8), dtype or "uint32")
    if not call.empty:
        rows = _rows(call)
        nisa06.nc_find_index8(dst=tile.base[rows], data=call.operand(data), vals=_plain(vals)[rows])
    return tile


def nc_match_replace8(data, vals, imm, dst_idx=None, mask=None, dtype=None) -> Tile:
    """data with the first match of each of vals' 8 values in each partition replaced by imm (with a
    mask, within the rectangle of data it keeps; the rest of the result is not written)."""
    call = Call([data], mask)
    tile = _new_tile(tuple(data.shape), _result_dtype(dtype, data))
    if not call.empty:
        rows, dst = _rows(call), tile.base if call.box is None else tile.base[call.box]
        nisa06.nc_match_replace8(dst=dst, data=call.operand(data), vals=_plain(vals)[rows], imm=imm,
                                 dst_idx=None if dst_idx is None else _plain(dst_idx)[rows])
    return tile


def _rows(call: Call) -> slice:
    """The partitions a masked per-partition call keeps (all of them without a mask)."""
    return call.box[0] if call.box is not None else slice(None)


def nc_transpose(data, mask=None, dtype=None, engine=engine.unknown) -> Tile:
    """[P, F] -> [F, P]: in PSUM through the Tensor engine, in SBUF on the Vector engine (32 x 32)."""
    rows, cols = data.shape[0], math.prod(data.shape[1:])
    on_vector = engine == nisa06.engine.vector or (engine == nisa06.engine.unknown and max(rows, cols) <= 32)
    buffer = dtypes.SBUF if on_vector else dtypes.PSUM
    chosen = nisa06.engine.vector if on_vector else nisa06.engine.tensor
    if len(data.shape) != 2:
        mask = _checked_mask(mask, data)
    # a mask keeps a rectangle of [P, F]: its transpose lands in the same rectangle of [F, P]
    return _rectangle(nisa06.nc_transpose, data, dtype, mask, (cols, rows),
                      lambda box, kept: (box[1], box[0]), buffer=buffer, engine=chosen)


def memset(shape, value, dtype, mask=None, engine=engine.unknown) -> Tile:
    call = Call([], mask, tuple(shape) if isinstance(shape, tuple | list) else (shape,))
    tile, dst = call.output(dtype)
    if not call.empty:
        nisa06.memset(dst=dst, value=value, engine=engine)
    return tile


def iota(expr, dtype, mask=None) -> Tile:
    """The values of an index expression (affine in partition and free indices) into a new tile."""
    if not isinstance(expr, IndexExpr):
        raise ShapeError(f"expr={expr!r} is not an index expression",
                         hint="build it from nl.arange / nl.mgrid, e.g. nl.arange(128)[:, None] * 4")
    values = expr.values if expr.values.ndim >= 2 else expr.values.reshape(1, -1)
    shape = tuple(np.broadcast_shapes(values.shape, (1, 1)))
    steps = _affine_steps(values, "iota")
    call = Call([], mask, shape)
    tile, dst = call.output(dtype)
    if call.empty:
        return tile
    start = int(values[tuple(b.start or 0 for b in call.box)] if call.box else values.flat[0])
    counts = dst.shape[1:]
    pattern = [[step, n] for step, n in zip(steps[1:], counts, strict=True)]
    nisa06.iota(dst=dst, pattern=pattern, offset=start, channel_multiplier=steps[0])
    return tile


def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None) -> Tile:
    """on_true_tile where `pred` (one comparison of affine index expressions) holds, else the value."""
    comparison = getattr(pred, "comparison", None)
    if comparison is None:
        raise ShapeError(f"pred={pred!r} is not one comparison of index expressions",
                         hint="write it as e.g. (i_f < i_p) with i_p, i_f from nl.arange / nl.mgrid")
    difference, cmp_op = comparison
    call = Call([on_true_tile], mask)
    values = np.broadcast_to(difference, call.shape)
    tile, dst = call.output(_result_dtype(dtype, on_true_tile))
    if call.empty:
        return tile
    values = values[call.box] if call.box is not None else values  # the pattern of the kept rectangle
    steps = _affine_steps(values, "affine_select's predicate")
    pattern = [[step, n] for step, n in zip(steps[1:], values.shape[1:], strict=True)]
    nisa06.affine_select(dst=dst, pattern=pattern, channel_multiplier=steps[0],
                         on_true_tile=_in_sbuf(call.operand(on_true_tile)), on_false_value=on_false_value,
                         cmp_op=cmp_op, offset=int(values.flat[0]))
    return tile


def dma_copy(dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             unique_indices=True):
    """dst = src, or with dst_rmw_op=np.add dst += src (in fp32, by the DMA engines; through an index
    tile a scatter or gather read-modify-write, whose indices must then be unique)."""
    call = Call([dst], mask)
    if call.empty:
        return dst
    target, source = call.view(dst, broadcast=False), call.view(src)
    if dst_rmw_op is None:
        _copy_into(target, source, oob_mode=oob_mode, dge_mode=dge_mode)
    else:
        _add_into(target, source, dst_rmw_op, "nisa.dma_copy(dst_rmw_op=...)", unique=unique_indices,
                 oob=oob_mode)
    return dst


def dma_transpose(src, axes=None, mask=None, dtype=None, dge_mode=dge_mode.unknown) -> Tile:
    """A DMA transpose (NKI 0.6's default axes when none are given; `dge_mode` as the SDK's tests
    pass it); dma_transpose does not cast, so another `dtype` is a copy after it."""
    _whole_mask(mask, [src], "nisa.dma_transpose")
    rank = len(src.shape)
    order = _default_transpose_axes(rank) if axes is None else tuple(axes) if isinstance(axes, tuple | list) \
        else (axes,)
    if sorted(order) != list(range(rank)):
        raise ShapeError(f"axes={axes!r} is not a permutation of the {rank} dims of src {list(src.shape)}")
    moved = _new_tile(tuple(src.shape[a] for a in order), src.dtype)
    nisa06.dma_transpose(dst=moved.base, src=_plain(src), axes=order, dge_mode=dge_mode)
    wanted = _result_dtype(dtype, src)
    if wanted == src.dtype:
        return moved
    tile = _new_tile(moved.shape, wanted)
    nisa06.tensor_copy(dst=tile.base, src=moved.base)
    return tile


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, dtype=None,
                       mask=None) -> Tile:
    call = Call([data0, data1], mask)
    tile, dst = call.output(_result_dtype(dtype, data0, data1))
    nisa06.tensor_tensor_scan(dst=dst, data0=call.operand(data0), data1=call.operand(data1),
                              initial=_plain(initial), op0=op0, op1=op1, reverse0=reverse0, reverse1=reverse1)
    return tile


def _with_dst(function, name: str):
    """Old calls that already took `dst=` (select_reduce, tensor_copy_predicated, ...): same bits."""
    def call(*args, mask=None, **kwargs):
        _whole_mask(mask, [], f"nisa.{name}")
        function(*map(_plain, args), **{k: _plain(v) for k, v in kwargs.items()})
        return kwargs.get("dst")
    call.__name__ = name
    return call


select_reduce = _with_dst(nisa06.select_reduce, "select_reduce")
tensor_scalar_cumulative = _with_dst(nisa06.tensor_scalar_cumulative, "tensor_scalar_cumulative")
tensor_copy_predicated = _with_dst(nisa06.tensor_copy_predicated, "tensor_copy_predicated")
nc_stream_shuffle = _with_dst(nisa06.nc_stream_shuffle, "nc_stream_shuffle")


def range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle,
                 reduce_res=None, reduce_op="maximum", range_start=0, on_false_value=None, mask=None,
                 dtype=None) -> Tile:
    """Elements whose free index lies in the bounds keep their value, the others on_false_value."""
    from trnsim.nki.legacy.language import fp32
    return _compute(nisa06.range_select, None, dtype or on_true_tile.dtype, mask,
                    shape=tuple(on_true_tile.shape), columns=("bound0", "bound1", "reduce_res"),
                    on_true_tile=_plain(on_true_tile), comp_op0=comp_op0, comp_op1=comp_op1,
                    bound0=bound0, bound1=bound1, reduce_cmd=reduce_cmd, reduce_res=_plain(reduce_res),
                    reduce_op=reduce_op, range_start=range_start,
                    on_false_value=fp32.min if on_false_value is None else on_false_value)


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, mask=None) -> Tile:
    _whole_mask(mask, [], "nisa.local_gather")
    valid = num_valid_indices if num_valid_indices is not None else math.prod(index.shape[1:])
    shape = (src_buffer.shape[0], valid * num_elem_per_idx)
    tile = _new_tile(shape, src_buffer.dtype)
    nisa06.local_gather(dst=tile.base, src_buffer=_plain(src_buffer), index=_plain(index),
                        num_elem_per_idx=num_elem_per_idx, num_valid_indices=num_valid_indices)
    return tile


def sequence_bounds(segment_ids, dtype=None) -> Tile:
    tile = _new_tile((segment_ids.shape[0], 2, *segment_ids.shape[1:]), dtype or segment_ids.dtype)
    nisa06.sequence_bounds(dst=tile.base, segment_ids=_plain(segment_ids))
    return tile


calls.checked_calls(globals(), "nisa", _ARGUMENTS, _HELPERS)
