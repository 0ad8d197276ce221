"""`neuronxcc.nki.language` (old nl): calls return new tiles, index expressions, `mask=`.

Each call is the 0.6 front end's instruction sequence with the old calling convention: the result
tile is allocated here (SBUF, or PSUM for matmuls) and the 0.6 `nisa` instruction writes it, so a
kernel gives the same bits in either API. The math calls live in legacy/math.py.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import sys
import textwrap

import numpy as np

import trnsim
from trnsim.core.isa import Memory
from trnsim.errors import ArgumentError, UnsupportedError
from trnsim.nki import backend, calls, dtypes
from trnsim.nki import isa as nisa06
from trnsim.nki import language as nl06
from trnsim.nki.isa_compute import _rmw_copy, _same_access
from trnsim.nki.language import (  # noqa: F401 - the names the old nl shares with 0.6
    bfloat16,
    bool_,
    float8_e4m3,
    float8_e5m2,
    float16,
    float32,
    int8,
    int16,
    int32,
    no_reorder,
    num_programs,
    private_hbm,
    program_id,
    program_ndim,
    psum,
    sbuf,
    shared_hbm,
    tfloat32,
    tile_size,
    uint8,
    uint16,
    uint32,
)
from trnsim.nki.legacy.index import Predicate, arange, mgrid, par_dim  # noqa: F401
from trnsim.nki.legacy.operands import ARGUMENTS as _ARGUMENTS
from trnsim.nki.legacy.operands import HELPERS as _HELPERS
from trnsim.nki.legacy.operands import Call, PendingMatmul, PendingReduce
from trnsim.nki.legacy.operands import holds_values as _holds_values
from trnsim.nki.legacy.operands import in_sbuf as _in_sbuf
from trnsim.nki.legacy.operands import is_tile as _is_tile
from trnsim.nki.legacy.operands import new_tile as _new_tile
from trnsim.nki.legacy.operands import note_values as _note_values
from trnsim.nki.legacy.tile import BlockTile, Indexed, Tile
from trnsim.nki.legacy.tile import on_chip as _on_chip
from trnsim.nki.legacy.tile import unwrap as _unwrap
from trnsim.nki.legacy.tile import wrap as _wrap
from trnsim.nki.tensor import DynSlice, IndirectTensor


class _Float32(str):
    """`nl.fp32`: the float32 dtype that also answers `.min` / `.max` (kernels use nl.fp32.min)."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


fp32 = _Float32("float32")
hbm = shared_hbm
"""Old kernels return tensors made in `nl.hbm`; the old simulator handed them back like shared HBM."""


class nc(int):  # noqa: N801 - NKI's name
    """`nl.nc(2)`: programs on logical NeuronCores; a number of programs here."""


def spmd_dim(*sizes) -> int:
    """`nl.spmd_dim(nl.nc(2), 2)`: one launch-grid dim of that many programs."""
    return int(np.prod([int(size) for size in sizes]))


def device_print(prefix, x=None, mask=None) -> None:
    """Print `x` (with a mask, the rectangle of it that the mask keeps)."""
    if _is_tile(x):
        call = Call([x], mask)
        x = None if call.empty else call.view(x, broadcast=False)
    nl06.device_print(prefix, x)


def affine_range(start, stop=None, step=1, directives=None) -> range:
    """A loop (the compiler directives of SDK 2.26, `directives=ncc.no_reorder()`, change no value)."""
    return nl06.affine_range(start, stop, step)


sequential_range = static_range = affine_range


def finfo(dtype):
    return np.finfo(dtypes.dtype(dtype).numpy)


# --- creation -------------------------------------------------------------------------------------
# `lazy_initialization=` (nki-samples' flash attention passes it to nl.zeros / nl.full) told the old
# compiler when it might fill the tile; the values are the same either way, so it is taken and ignored.
def ndarray(shape, dtype, buffer=None, name: str = "", lazy_initialization: bool = False) -> Tile:
    return _new_tile(shape, dtype, buffer, name)


def full(shape, fill_value, dtype, buffer=None, name: str = "", lazy_initialization: bool = False) -> Tile:
    """A filled tile; a block tensor's blocks are each filled when first used, as allocated."""
    tile = _new_tile(shape, dtype, buffer, name)
    if isinstance(tile, BlockTile):
        make = tile.make
        tile.make = lambda: _filled(make(), fill_value)
        return tile
    return _filled(tile, fill_value)


def _filled(tile: Tile, value) -> Tile:
    _note_values(tile.base)
    nisa06.memset(dst=tile.base, value=value)
    return tile


def zeros(shape, dtype, buffer=None, name: str = "", lazy_initialization: bool = False) -> Tile:
    return full(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=None, name: str = "", lazy_initialization: bool = False) -> Tile:
    return full(shape, 1, dtype, buffer, name)


def empty_like(a, dtype=None, buffer=None, name: str = "", lazy_initialization: bool = False) -> Tile:
    return _new_tile(a.shape, dtype or a.dtype, buffer or a.buffer, name)


def zeros_like(a, dtype=None, buffer=None, name: str = "", lazy_initialization: bool = False) -> Tile:
    return zeros(a.shape, dtype or a.dtype, buffer or a.buffer, name)


def ones_like(a, dtype=None, buffer=None, name: str = "", lazy_initialization: bool = False) -> Tile:
    return ones(a.shape, dtype or a.dtype, buffer or a.buffer, name)


def full_like(a, fill_value, dtype=None, buffer=None, name: str = "",
              lazy_initialization: bool = False) -> Tile:
    return full(a.shape, fill_value, dtype or a.dtype, buffer or a.buffer, name)


def rand(shape, dtype=float32) -> Tile:
    return _wrap(nl06.rand(tuple(shape) if isinstance(shape, tuple | list) else (shape,), dtype))


def random_seed(seed, mask=None) -> None:
    nl06.random_seed(_unwrap(seed))


def shared_constant(constant, dtype=None) -> Tile:
    return _wrap(nl06.shared_constant(constant, dtype))


def shared_identity_matrix(n, dtype=uint8) -> Tile:
    return _wrap(nl06.shared_identity_matrix(n, dtype))


# --- data movement ----------------------------------------------------------------------------------
def load(src, mask=None, dtype=None) -> Tile:
    """HBM (or SBUF) -> a new SBUF tile of the access's shape."""
    call = Call([src], mask)
    tile, dst = call.output(dtype or src.dtype)
    if not call.empty:
        nisa06.dma_copy(dst=dst, src=call.view(src, broadcast=False))
    return tile


def store(dst, value, mask=None):
    """A tile (or number) -> `dst`, usually an HBM access."""
    call = Call([dst], mask)
    if not call.empty:
        _copy_into(call.view(dst, broadcast=False), call.source(value))
    return dst


def _copy_into(target, value, **dma) -> None:
    """dst <- value: a DMA when either side is in HBM, else a Vector-engine copy; numbers memset."""
    _note_values(target)
    if not _is_tile(value) and target.storage.memory is Memory.HBM and target.ndim:
        # a number into HBM: memset on chip, then the DMAs the old compiler made of the store
        rows, total = nl06.tile_size.pmax, target.shape[0]
        for start in range(0, total, rows):
            part = target[start:start + rows if start + rows < total else total]  # `min` is nl.min here
            staged = backend.new_tensor(part.shape, target.dtype, dtypes.SBUF)
            nisa06.memset(dst=staged, value=value)
            nisa06.dma_copy(dst=part, src=staged, **dma)
    elif not _is_tile(value):
        nisa06.memset(dst=target, value=value)
    elif Memory.HBM in (target.storage.memory, value.storage.memory):
        nisa06.dma_copy(dst=target, src=_in_sbuf(value), **dma)  # DMAs do not read PSUM
    else:
        nisa06.tensor_copy(dst=target, src=value, engine=nisa06.engine.vector)


def atomic_rmw(dst, value, op, mask=None):
    """dst = op(dst, value) on HBM rows picked by an index tile (`t[idx_tile, i_f]`), atomically:
    rows picked more than once add one after another. As documented, op is np.add only and dst is
    indexed indirectly."""
    call = Call([dst], mask)
    if not call.empty:
        target = call.view(dst, broadcast=False)
        if not isinstance(target, IndirectTensor):
            raise UnsupportedError("nl.atomic_rmw supports only a dst indexed by an index tile "
                                   "(t[idx_tile, i_f])", what="nl.atomic_rmw direct dst")
        _add_into(target, call.source(value), op, "nl.atomic_rmw", unique=False, oob=nisa06.oob_mode.error)


def _add_into(target, value, op, what: str, unique: bool, oob) -> None:
    """target += value by the DMA engines: the old API's read-modify-writes (op np.add only)."""
    if not _is_add(op):
        raise UnsupportedError(f"{what} supports op=np.add only, not {op!r}", what=f"{what} op")
    if not _is_tile(value):  # a number: the tile it stands for, made on chip first
        staged = backend.new_tensor(target.shape, target.dtype, dtypes.SBUF)
        nisa06.memset(dst=staged, value=value)
        value = staged
    value = _in_sbuf(value)
    if isinstance(target, IndirectTensor) or isinstance(value, IndirectTensor):
        _rmw_copy(target, value, unique=unique, oob=oob)
    else:
        nisa06.dma_compute(dst=target, srcs=[target, value], reduce_op=nl06.add)


def assign(target, value) -> None:
    """`tile[...] = value` (a matmul result is computed straight into a PSUM target)."""
    if isinstance(value, Indexed) and value.tile is target.tile and value.keys is target.keys:
        return  # `t[k] += x` stores its own result back: updated in place already
    pending = value.pending if isinstance(value, Tile) else None
    call = Call([target], None)
    view = call.view(target, broadcast=False)
    if pending is not None and pending.fits(view):
        value.pending = None
        pending.issue(view, accumulate=False)
        return
    source = call.source(value)
    box = value.written if isinstance(value, Tile) else None
    if box is not None and _is_tile(source) and len(box) == view.ndim == source.ndim:
        if any(b.start == b.stop for b in box):
            return  # `t[...] = op(..., mask=m)` with m keeping nothing leaves t as it was
        view, source = view[box], source[box]  # the old compiler wrote only the masked part of t
    if not _same_access(source, view):
        _copy_into(view, source)


def update(tile, op: str, value) -> None:
    """`tile op= value` in place (tile or indexed tile); `psum += nc_matmul(...)` accumulates the
    matmul in PSUM."""
    pending = value.pending if isinstance(value, Tile) else None
    # A plain tile is its own view (the common `psum += matmul`); an indexed one resolves first.
    view = tile.base if type(tile) is Tile else Call([tile], None).view(tile, broadcast=False)
    if isinstance(tile, Tile):
        tile.written = None  # written whole from here on (see assign)
    if op == "add" and pending is not None and view.storage.memory is Memory.PSUM:
        value.pending = None
        pending.issue(view, accumulate=True if _holds_values(view) else None)
        return
    from trnsim.nki.legacy import math
    _note_values(view)
    math.binary(op, tile, value, dtype=tile.dtype, out=tile)


def load_transpose2d(src, mask=None, dtype=None) -> Tile:
    _whole_mask(mask, [src], "nl.load_transpose2d")
    return _wrap(nl06.load_transpose2d(_plain(src), dtype))


def copy(src, mask=None, dtype=None) -> Tile:
    call = Call([src], mask)
    tile, dst = call.output(dtype or src.dtype)
    if not call.empty:
        nisa06.tensor_copy(dst=dst, src=call.view(src), engine=nisa06.engine.vector)
    return tile


def static_cast(input_data, dtype):
    """A copy in another dtype; outside a kernel (the tutorials cast their numpy inputs) a numpy cast."""
    if isinstance(input_data, np.ndarray | np.generic):
        return np.asarray(input_data).astype(dtypes.dtype(dtype).numpy)
    return copy(input_data, dtype=dtype)


def matmul(x, y, transpose_x=False, mask=None) -> Tile:
    """x @ y (x given as [K, M] with transpose_x): a pending result, as nisa.nc_matmul's."""
    _tiles("nl.matmul", x=x, y=y)
    _whole_mask(mask, [], "nl.matmul")
    stationary = _plain(x) if transpose_x else nl06.transpose(_plain(x))
    return Tile(None, pending=PendingMatmul(stationary, _plain(y), {}))


def transpose(x, dtype=None, mask=None) -> Tile:
    _whole_mask(mask, [x], "nl.transpose")
    return _wrap(nl06.transpose(_plain(x), dtype))


def broadcast_to(src, shape) -> Tile:
    return _wrap(nl06.broadcast_to(_plain(src), shape))


def expand_dims(data, axis) -> Tile:
    return _wrap(nl06.expand_dims(_plain(data), axis))


def gather_flattened(data, indices, mask=None, dtype=None) -> Tile:
    _whole_mask(mask, [indices], "nl.gather_flattened")
    return _wrap(nl06.gather_flattened(_plain(data), _plain(indices), dtype=dtype))


def loop_reduce(x, op, loop_indices, dtype=None, mask=None) -> Tile:
    """Reduce `x` into the tile this result is assigned to: `acc[...] = nl.loop_reduce(x, np.add, i)`,
    or `acc = nl.loop_reduce(...)` as the SDK's docstring writes it (acc = op(acc, x) in place)."""
    _tiles("nl.loop_reduce", x=x)
    _whole_mask(mask, [x], "nl.loop_reduce")
    from trnsim.nki.legacy.isa import _op
    pending = PendingReduce(_plain(x), _op(op), dtype)
    target = _assigned_tile()
    if target is None:
        return Tile(None, pending=pending)
    pending.issue(target.base, accumulate=None)
    return target


def _assigned_tile() -> Tile | None:
    """The on-chip tile the kernel line calling us assigns to by name (`acc = nl.loop_reduce(...)`),
    as the old compiler read it from the kernel's source; None for any other use."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    name = frame and _assignment_targets(frame.f_code).get(frame.f_lineno)
    tile = frame.f_locals.get(name) if name else None
    return tile if type(tile) is Tile and tile.pending is None and _on_chip(tile) else None


_PACKAGE_DIR = os.path.dirname(os.path.abspath(trnsim.__file__)) + os.sep


@functools.lru_cache(maxsize=256)
def _assignment_targets(code) -> dict[int, str]:
    """Line -> name, for each `name = <...>.loop_reduce(...)` statement of a kernel function (each of
    its lines): only a statement whose whole value is the call assigns its result to the name."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):
        return {}
    first = code.co_firstlineno - 1
    return {line + first: node.targets[0].id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and _calls_loop_reduce(node.value)
            for line in range(node.lineno, node.end_lineno + 1)}


def _calls_loop_reduce(value) -> bool:
    function = value.func if isinstance(value, ast.Call) else None
    return getattr(function, "attr", getattr(function, "id", None)) == "loop_reduce"


def ds(start, size) -> DynSlice:
    return DynSlice(start, size)


# --- helpers for calls that take no mask ----------------------------------------------------------
def _tiles(call: str, **operands) -> None:
    """Operands that must be tiles (numbers go elsewhere in these calls)."""
    for name, value in operands.items():
        if not _is_tile(value):
            raise ArgumentError(f"{name} is {calls.describe(value)}; {call} takes a tile there")


def _is_add(op) -> bool:
    name = nisa06.op_name(op)
    return isinstance(name, str) and name == "add"


def _plain(value):
    """A Tile or indexed tile as the 0.6 front end's view; anything else unchanged."""
    if isinstance(value, Indexed):
        return value.resolve()
    return value.base if isinstance(value, Tile) else value


def _whole_mask(mask, operands, op: str) -> None:
    """Calls built on 0.6 conveniences take only masks that keep every iteration."""
    if mask is None:
        return
    call = Call(operands, mask)
    if call.box is not None and any(b.indices(n) != (0, n, 1) for b, n in zip(call.box, call.shape,
                                                                              strict=True)):
        raise UnsupportedError(f"mask= that leaves iterations out on {op} is not emulated",
                               what=f"{op} mask", hint="load or copy the masked part first")


_OLD_ONLY = {"all_reduce": "nki.collectives in the NKI 0.6 API"}


def __getattr__(name: str):
    if name in _OLD_ONLY:
        raise UnsupportedError(f"nl.{name} is not emulated by trnsim's old-API front end", what=f"nl.{name}",
                               hint=f"use {_OLD_ONLY[name]}")
    raise AttributeError(f"module 'neuronxcc.nki.language' has no attribute {name!r}")


from trnsim.nki.legacy.math import PUBLIC  # noqa: E402 - the math half of the old nl

globals().update(PUBLIC)

calls.checked_calls(globals(), "nl", _ARGUMENTS, _HELPERS)
