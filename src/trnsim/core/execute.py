"""EXECUTE: the values each instruction produces (numpy on whole tiles, hardware numerics).

A rule gets the `Instruction` and an `Operands` object bound to the actual memory, reads its
inputs (`io.f32(i)` casts to fp32 as the engines do on input), computes in fp32 and writes with
`io.write(j, values)`, which casts to the destination dtype through `to_storage` (the one place
engine output casts happen; it calls trnsim.numerics). Rules for groups of opcodes live in
execute_*.py modules that register into the same table; `load_rules()` imports them all.
"""

from __future__ import annotations

import warnings

import numpy as np

from trnsim import numerics
from trnsim.core import blas
from trnsim.core.isa import Memory, Opcode
from trnsim.core.memory import DType, View, check_initialised
from trnsim.core.rules import RuleTable
from trnsim.core.runtime import current as current_runtime
from trnsim.core.trace import InputRef, Instruction
from trnsim.errors import HazardError, KernelError, KernelWarning, TrnsimError, UnsupportedError

EXECUTE = RuleTable("EXECUTE")
F32 = np.float32


def to_storage(values: np.ndarray, dtype: DType, rounding: str | None = None) -> np.ndarray:
    """Cast engine results (fp32) to a destination dtype: RNE, ints round half-even and saturate."""
    values = np.asarray(values)
    if values.dtype == dtype.numpy and dtype.name != "tfloat32":  # tf32 is kept in fp32 storage
        return values
    if values.dtype != F32:
        values = values.astype(F32)
    return numerics.cast(values, numerics.get_format(dtype.name), rounding=rounding)


class Operands:
    """The memory an instruction touches, with the reads and writes rules need."""

    __slots__ = ("ins", "inputs", "outputs", "state", "strict")

    def __init__(self, ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...],
                 state, strict: bool):
        self.ins = ins
        self.inputs = inputs
        self.outputs = outputs
        self.state = state
        self.strict = strict

    def raw(self, index: int) -> np.ndarray:
        """Input `index` as stored (no cast)."""
        view = self.inputs[index]
        if self.strict:
            self._check_written(view)
        return view.array()

    def f32(self, index: int) -> np.ndarray:
        """Input `index` cast to fp32, as the engines read it."""
        values = self.raw(index)
        return values if values.dtype == F32 else values.astype(F32)

    def f32_reused(self, index: int) -> np.ndarray:
        """Like `f32`, but upcasts the whole buffer once and reuses it until the buffer is written
        (matmul operands are read many times per load)."""
        view = self.inputs[index]
        if self.strict:
            self._check_written(view)
        return f32_reused(view)

    def _check_written(self, view: View) -> None:
        """Strict mode: reading memory no instruction wrote is a hazard at this instruction's line."""
        try:
            check_initialised(view, self.ins.opcode.value)
        except HazardError as error:
            raise hazard(self.ins, error.message, error.hint) from None

    def value(self, key: str, default=None):
        """A parameter: a Python number, or the fp32 values of the input it refers to."""
        param = self.ins.params.get(key, default)
        if isinstance(param, InputRef):
            return self.f32(param.index)
        return param

    def out(self, index: int = 0) -> View:
        return self.outputs[index]

    def current(self, index: int = 0) -> np.ndarray:
        """What output `index` holds now, in fp32 (for accumulate and keep-existing rules)."""
        values = self.outputs[index].array()
        return values if values.dtype == F32 else values.astype(F32)

    def write(self, index: int, values, rounding: str | None = None) -> None:
        """Cast `values` to output `index`'s dtype and store them (broadcast to its shape)."""
        view = self.outputs[index]
        stored = to_storage(values, view.element, rounding)
        if stored.shape != view.shape:
            stored = np.broadcast_to(stored.reshape(_broadcastable(stored.shape, view.shape)), view.shape)
        view.assign(stored)
        mark_written(view)

    def write_raw(self, index: int, values: np.ndarray) -> None:
        """Store bits unchanged (same-dtype copies)."""
        view = self.outputs[index]
        view.assign(values.reshape(view.shape) if values.size == _size(view) else values)
        mark_written(view)


def f32_reused(view: View) -> np.ndarray:
    """The view's values in fp32, from a whole-buffer upcast kept until the buffer is written."""
    buffer = view.storage
    if view.element is not buffer.dtype or buffer.data.dtype == F32:
        values = view.array()
        return values if values.dtype == F32 else values.astype(F32)
    if buffer.shadow is None:
        values = buffer.values()
        buffer.shadow = current_runtime().pool.empty(values.size, F32)
        np.copyto(buffer.shadow, values, casting="unsafe")
    shared = buffer._shared
    key = (view.offset, view.shape, view.strides)
    window = shared.windows.get(key)
    if window is None:  # a K loop reads each window of a block many times
        strides = tuple(s * _F32_BYTES for s in view.strides)
        window = shared.windows[key] = np.ndarray(view.shape, F32, shared.shadow, view.offset * _F32_BYTES,
                                                   strides)
    return window


_F32_BYTES = np.dtype(F32).itemsize


def saturated(values, dtype: np.dtype) -> np.ndarray:
    """Exact integers stored in an integer dtype, clamped to its range as engine writes saturate."""
    limits = np.iinfo(dtype)
    return np.clip(values, limits.min, limits.max).astype(dtype)


def _size(view: View) -> int:
    return int(np.prod(view.shape))


def _broadcastable(shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
    """Results computed on a differently-shaped but same-size tile are laid out row-major."""
    if int(np.prod(shape)) == int(np.prod(target)):
        return target
    return shape


def mark_written(view: View) -> None:
    view.storage.shadow = None
    view.mark_written()
    if view.storage.memory is Memory.PSUM and view.storage.accum is not None:
        accum_mask(view)[...] = False


def accum_mask(view: View) -> np.ndarray:
    """Which elements of a PSUM view belong to an open matmul accumulation group."""
    return np.ndarray(view.shape, np.bool_, view.storage.accum, view.offset, tuple(view.strides))


def end_accumulation(view: View) -> None:
    """A non-matmul instruction touched this PSUM region: the next matmul overwrites it."""
    if view.storage.memory is Memory.PSUM and view.storage.accum is not None:
        accum_mask(view)[...] = False


def accumulate_matmul(io: Operands, product, mode: bool | None) -> None:
    """PSUM semantics of nc_matmul: overwrite, add, or (None) overwrite first then add.

    `product` is the fp32 result, or the fp32 (stationary [K, M], moving [K, N]) pair it is the
    product of: then BLAS writes or adds it straight into an fp32 PSUM tile. When every element of
    the region already holds a matmul sum (the K loop after its first step), its written and
    accumulate flags are all set, so they are left alone (hot path)."""
    view = io.out(0)
    flags = accum_mask(view) if view.storage.accum is not None else None
    settled = flags is not None and bool(flags.all())  # accumulate flags imply written ones
    if (mode is True and not settled and view.storage.written is not None
            and not view.written_mask().all()):
        warnings.warn(f"{io.ins.where}: nisa.nc_matmul: accumulate=True onto PSUM that was never "
                      f"written ({view.storage.name}); the hardware result is undefined",
                      KernelWarning, stacklevel=2)
    add = mode is True or (mode is None and settled)
    partial = not add and mode is None and flags is not None and bool(flags.any())  # add where flagged
    if not add and not partial:
        view.will_overwrite()  # a first matmul writes the whole region: a whole tile needs no fill
    target = view.array()
    if isinstance(product, tuple) and target.dtype == F32 and target.ndim == 2 and not partial:
        blas.gemm(*product, target, add)
    else:
        if isinstance(product, tuple):
            stationary, moving = product
            product = (stationary.T @ moving).reshape(target.shape)
        if add and target.dtype == F32:
            np.add(target, product, out=target)
        elif add or partial:
            total = target.astype(F32) + product
            target[...] = to_storage(total if add else np.where(flags, total, product), view.element)
        else:
            target[...] = to_storage(product, view.element)
    if not settled:
        settle(view)


def settle(view: View) -> None:
    """A PSUM region now holds matmul sums: written, and later matmuls (accumulate=None) add to it."""
    if view.storage.written is not None:
        view.written_mask()[...] = True
    if view.storage.accum is not None:
        accum_mask(view)[...] = True


def run(ins: Instruction, inputs: tuple[View, ...], outputs: tuple[View, ...], state,
        strict: bool) -> None:
    """Execute one instruction on real memory. Whatever goes wrong (even inside trnsim, and even when
    the instruction ran from the deferred queue long after it was issued) names its kernel line."""
    op = f"nisa.{ins.opcode.value}"
    rule = EXECUTE.get(ins.opcode)
    if rule is None:
        raise UnsupportedError(f"{ins.opcode.value} has no execution rule", what=op, where=ins.where, op=op)
    io = Operands(ins, inputs, outputs, state, strict)
    if ins.opcode is not Opcode.MATMUL:
        for view in inputs:
            end_accumulation(view)
    try:
        with np.errstate(all="ignore"):
            rule(ins, io)
    except TrnsimError as error:
        error.locate(ins.where, op)
        raise
    except Warning:  # a KernelWarning the caller's filter made an error: it is the kernel's, not ours
        raise
    except Exception as error:
        failure = f"{type(error).__name__}: {error}"
        raise KernelError(f"executing this instruction failed inside trnsim ({failure})", where=ins.where,
                          op=op, hint="this is a trnsim bug; please report it") from error


def hazard(ins: Instruction, message: str, hint: str | None = None) -> HazardError:
    """The one kind of error execution raises: a value-dependent hazard, at the kernel's line (the
    rule raises it before writing anything)."""
    return HazardError(message, where=ins.where, op=f"nisa.{ins.opcode.value}", hint=hint)


# The rest of the table, registered by group (at import, never lazily).
from trnsim.core import execute_data, execute_gpsimd, execute_mx, execute_vector  # noqa: E402, F401
