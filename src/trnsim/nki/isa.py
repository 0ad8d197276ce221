"""`nki.isa` (nisa): one function per NeuronCore instruction, destination first (NKI 0.6).

Each call normalises its arguments, records them as an `Instruction` through the active core
(which checks and, under `simulate`, executes it) and returns `dst`. Options trnsim does not
emulate (e.g. reduce_cmd=reduce in tensor_scalar_cumulative) raise `UnsupportedError` naming them;
docs/nki.md lists them.
"""

from __future__ import annotations

from numbers import Integral, Real

from trnsim.core.isa import Engine, Memory, Opcode, RegisterRef
from trnsim.core.trace import InputRef
from trnsim.errors import ArgumentError, KernelError, UnsupportedError
from trnsim.nki import backend, calls
from trnsim.nki import isa_constants as constants
from trnsim.nki.isa_constants import (
    dge_mode,
    dma_engine,
    engine,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from trnsim.nki.registers import VirtualRegister, register_alloc, register_load, register_move, register_store
from trnsim.nki.tensor import IndirectTensor, NkiTensor

__all__ = [
    "constants", "dge_mode", "dma_engine", "engine", "gpsimd_engine", "matmul_perf_mode", "nc_version",
    "oob_mode", "reduce_cmd", "scalar_engine", "tensor_engine", "unknown_engine", "vector_engine",
    "VirtualRegister", "register_alloc", "register_load", "register_move", "register_store",
]


NkiValidationError = KernelError  # NKI's name for a refused instruction; trnsim raises KernelError kinds


def get_nc_version() -> nc_version:
    return nc_version(backend.core().spec.generation)


def get_nc_sub_version() -> int:
    return 0


def op_name(op) -> str:
    """The NKI name of an ALU/activation operator given as nl.add, np.add or "add"."""
    if op is None:
        return None
    if isinstance(op, str):
        return op
    name = getattr(op, "nki_op", None) or getattr(op, "value", None) or getattr(op, "__name__", None)
    if not isinstance(name, str):
        return op  # not an operator: the contract check refuses it by parameter name
    return _OP_ALIASES.get(name, name)


_OP_ALIASES = {"absolute": "abs", "true_divide": "divide", "invert": "bitwise_not"}  # numpy name -> NKI name


def _enum_value(value):
    return getattr(value, "value", value)


class _Inputs(list):
    """The data operands of one instruction; tensor-valued parameters become InputRefs."""

    def ref(self, value):
        if isinstance(value, NkiTensor):
            self.append(value)
            return InputRef(len(self) - 1)
        if isinstance(value, VirtualRegister):
            return value.read_value()
        return _number(value)


def _issue(opcode: Opcode, dst, srcs, params, engine_choice=None, name=None):
    backend.issue(opcode, dst, srcs, params, engine_choice, name or "")
    return dst[0] if isinstance(dst, tuple) else dst


# --- data movement -------------------------------------------------------------------------------
def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, engine=None,
             name=None):
    params = {"dge_mode": _enum_value(dge_mode), "oob_mode": _enum_value(oob_mode), "priority": priority,
              "queue": _enum_value(engine)}
    _same_size(dst, src, "dma_copy")
    srcs = [src]
    indirect = [(role, view) for role, view in (("src", src), ("dst", dst))
                if isinstance(view, IndirectTensor)]
    if len(indirect) > 1:
        raise UnsupportedError("dma_copy with indirect source and destination", what="nisa.dma_copy indirect")
    for role, view in indirect:
        params.update(indirect=role, indirect_dim=view.indirect_dim, scalar_step=view.scalar_step)
        srcs.append(view.index)
    return _issue(Opcode.DMA_COPY, dst, srcs, params, "dma", name)


def _default_transpose_axes(rank: int) -> tuple[int, ...]:
    """dma_transpose's permutation when none is given: the reversal of the dims, except that a 4-D
    tile keeps its middle dims in order, (3, 1, 2, 0), as nki.isa.dma_transpose documents."""
    return (3, 1, 2, 0) if rank == 4 else tuple(reversed(range(rank)))


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error,
                  name=None):
    if any(isinstance(view, IndirectTensor) for view in (dst, src)):
        raise UnsupportedError("dma_transpose of a view with a runtime offset (a scalar_offset tile or a "
                               "vector_offset) is not emulated", what="nisa.dma_transpose indirect",
                               hint="dma_copy it into SBUF first, or give scalar_offset as an int")
    rank = len(src.shape)
    if axes is not None and not isinstance(axes, tuple | list):
        raise ArgumentError(f"axes={axes!r}: give the permutation of src's dims as a tuple",
                            op="nisa.dma_transpose")
    axes = tuple(axes) if axes is not None else _default_transpose_axes(rank)
    return _issue(Opcode.DMA_TRANSPOSE, dst, [src], {"axes": axes, "dge_mode": _enum_value(dge_mode)}, "dma",
                  name)


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    _same_size(dst, src, "tensor_copy")
    return _issue(Opcode.TENSOR_COPY, dst, [src], {}, engine, name)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    return _issue(Opcode.TENSOR_COPY_PREDICATED, dst, [src, predicate], {"reverse_pred": reverse_pred},
                  None, name)


def memset(dst, value, engine=engine.unknown, name=None):
    return _issue(Opcode.MEMSET, dst, [], {"value": value}, engine, name)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    params = {"pattern": _pattern(pattern), "offset": _register_operand(offset),
              "channel_multiplier": channel_multiplier}
    return _issue(Opcode.IOTA, dst, [], params, None, name)


def _pattern(pattern):
    """[[step, count], ...] as a tuple of pairs; anything else is passed on for the check to name."""
    if not isinstance(pattern, tuple | list):
        return pattern
    return tuple(_ints(pair) for pair in pattern)


def _ints(values):
    """A sequence of integers as a tuple (numpy integers become ints); else `values` unchanged."""
    if isinstance(values, tuple | list) and all(isinstance(v, Integral) for v in values):
        return tuple(int(v) for v in values)
    return values


def _tiling(values):
    """A matmul's tile_position / tile_size: () when not given, else as `_ints` makes it."""
    if values is None or (isinstance(values, tuple | list) and not values):
        return ()
    return _ints(values)


def _number(value):
    """A numeric immediate as a Python float; anything else is passed on for the check to name."""
    if isinstance(value, Real) and not isinstance(value, bool):
        return float(value)
    return value


def _register_operand(value):
    """A register given as an operand is read when the instruction runs (not control flow: a
    trace_only run records it as simulate does); anything else is passed on for the check."""
    return RegisterRef(value.id) if isinstance(value, VirtualRegister) else value


def _same_size(dst, src, op: str) -> None:
    if isinstance(dst, NkiTensor) and isinstance(src, NkiTensor) and dst.size != src.size:
        from trnsim.errors import ShapeError
        raise ShapeError(f"dst {dst.name!r} {list(dst.shape)} and src {src.name!r} {list(src.shape)} have "
                         f"different sizes", op=f"nisa.{op}")


# --- Tensor Engine -------------------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=matmul_perf_mode.none, name=None):
    params = {"accumulate": accumulate, "is_transpose": is_transpose,
              "perf_mode": _enum_value(perf_mode),
              "tile_position": _tiling(tile_position),
              "tile_size": _tiling(tile_size),
              "moving_free": moving.size // moving.shape[0]}
    return _issue(Opcode.MATMUL, dst, [stationary, moving], params, "tensor", name)


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """With no engine named, the compiler picks one that can write dst: the Tensor Engine writes PSUM
    only, so an SBUF dst gets the Vector engine (nki.isa.nc_transpose, "Memory types")."""
    if getattr(engine, "value", engine) in (None, "unknown") and _memory(dst) is Memory.SBUF:
        engine = Engine.VECTOR.value
    return _issue(Opcode.TRANSPOSE, dst, [data], {}, engine, name)


def _memory(tile):
    return tile.storage.memory if isinstance(tile, NkiTensor) else None


def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, tile_size=None,
                 accumulate=None, name=None):
    """MX matmul (trn3): x4-packed operands with E8M0 scales per 32 contraction values (K = 4 x P)."""
    params = {"accumulate": accumulate, "tile_position": _tiling(tile_position),
              "tile_size": _tiling(tile_size),
              "moving_free": moving.size // moving.shape[0]}
    return _issue(Opcode.MATMUL_MX, dst, [stationary, moving, stationary_scale, moving_scale], params,
                  "tensor", name)


def quantize_mx(dst, src, dst_scale, name=None):
    """bf16/fp16 -> MXFP8 x4 words plus one E8M0 scale per 8-partition x 4-element group (trn3)."""
    return _issue(Opcode.QUANTIZE_MX, (dst, dst_scale), [src], {}, None, name)

from trnsim.nki.isa_compute import *  # noqa: E402, F401, F403 - Scalar/Vector/GpSimd instructions

calls.checked_calls(globals(), "nisa", calls.NISA_ARGUMENTS)

OLD_API = {"tensor_copy_dynamic_src": "nisa.dma_copy from a view with scalar_offset / vector_offset",
           "tensor_copy_dynamic_dst": "nisa.dma_copy into a view with scalar_offset / vector_offset"}
"""nisa names NKI 0.4.0 removed: using one is an UnsupportedError naming what replaced it."""


def __getattr__(name: str):
    """An old name resolves (so `hasattr` stays a plain question) to a call that refuses at the
    kernel's line."""
    if name not in OLD_API:
        raise AttributeError(f"module 'nki.isa' has no attribute {name!r}")

    def removed(*args, **kwargs):
        from trnsim.errors import SourceLoc
        raise UnsupportedError(f"nisa.{name} was removed in NKI 0.4.0; trnsim emulates NKI 0.6",
                               what=f"nisa.{name}", hint=f"use {OLD_API[name]}", where=SourceLoc.of_caller())
    removed.__name__ = name
    return removed
