"""NKI dtypes and memory regions.

NKI spells dtypes as names (`nl.bfloat16 == "bfloat16"`); trnsim keeps that, so a tensor's
`.dtype` compares equal to the `nl` constant, to the name and to the numpy dtype. `dtype(x)`
accepts any of those spellings, torch dtypes and JAX/numpy dtypes, and returns the `DType` with
its numpy storage type (ml_dtypes for bf16 and fp8). Packed MX types keep their raw words.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from trnsim import numerics
from trnsim.core.isa import Memory
from trnsim.core.memory import Buffer, DType
from trnsim.errors import ArgumentError, DTypeError

_STORAGE = {
    "bool_": np.uint8, "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
    "float16": np.float16, "float32": np.float32, "bfloat16": ml_dtypes.bfloat16,
    "tfloat32": np.float32, "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
}
_PACKED = {"float8_e5m2_x4": (np.uint32, 4), "float8_e4m3fn_x4": (np.uint32, 4),
           "float4_e2m1fn_x4": (np.uint16, 4)}
_ALIASES = {"bool": "bool_", "float": "float32", "half": "float16", "bf16": "bfloat16",
            "fp32": "float32", "fp16": "float16", "tf32": "tfloat32"}

DTYPES: dict[str, DType] = {name: DType(name, np.dtype(kind)) for name, kind in _STORAGE.items()}
DTYPES.update({name: DType(name, np.dtype(kind), per_word) for name, (kind, per_word) in _PACKED.items()})
NAMES = tuple(DTYPES)


def dtype(value) -> DType:
    """The DType for an NKI name, a numpy/ml_dtypes/JAX dtype or a torch dtype."""
    if isinstance(value, DType):
        return value
    name = _name_of(value)
    name = _ALIASES.get(name, name)
    try:
        return DTYPES[name]
    except KeyError:
        raise DTypeError(f"unknown dtype {value!r}", hint=f"use one of {', '.join(NAMES)}") from None


_WIDENED_FLOATS = ("bfloat16", "float32")
"""The new types two floats that do not hold each other widen to (e4m3 with e5m2: bf16; fp16
with bf16: fp32); tf32 is never one."""


def promoted(a: DType, b: DType) -> DType:
    """The dtype two tiles' values combine in, by the SDK's "NKI Type Promotion" (SDK 2.26
    nki/api/nki.api.shared.rst): (float, int): the float; (float, float): the one that holds the
    other, else the first of `_WIDENED_FLOATS` that holds both; (int, int): the wider, or a widened
    int, or float32 where that would take 64 bits (which the hardware lacks)."""
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.is_float:
        for candidate in (a, b, *map(dtype, _WIDENED_FLOATS)):
            if _holds(candidate, a) and _holds(candidate, b):
                return candidate
        return dtype("float32")
    widened = np.result_type(a.numpy, b.numpy)
    return dtype("float32") if widened.itemsize > 4 else dtype(widened)


def _holds(wide: DType, narrow: DType) -> bool:
    """Whether every value of `narrow` is one of `wide` (as many exponent and mantissa bits)."""
    w, n = numerics.get_format(wide.name), numerics.get_format(narrow.name)
    return w.exponent_bits >= n.exponent_bits and w.mantissa_bits >= n.mantissa_bits


def _name_of(value) -> str:
    if isinstance(value, str):
        return value
    module = type(value).__module__
    if module.startswith("torch"):
        return str(value).rsplit(".", 1)[-1]
    try:
        return np.dtype(value).name
    except (TypeError, ValueError):
        return str(value)


@dataclass(frozen=True)
class MemoryRegion:
    """`nl.sbuf`, `nl.psum`, `nl.hbm`, `nl.shared_hbm`, `nl.private_hbm`."""

    name: str
    memory: Memory

    def __repr__(self) -> str:
        return f"nl.{self.name}"


SBUF = MemoryRegion("sbuf", Memory.SBUF)
PSUM = MemoryRegion("psum", Memory.PSUM)
HBM = MemoryRegion("hbm", Memory.HBM)
SHARED_HBM = MemoryRegion("shared_hbm", Memory.HBM)
PRIVATE_HBM = MemoryRegion("private_hbm", Memory.HBM)
REGIONS = {r.name: r for r in (SBUF, PSUM, HBM, SHARED_HBM, PRIVATE_HBM)}

def region(value) -> MemoryRegion:
    if isinstance(value, MemoryRegion):
        return value
    raise ArgumentError(f"buffer={value!r} is not a memory region",
                      hint="use nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or nl.private_hbm")


def region_of(buffer: Buffer) -> MemoryRegion:
    return REGIONS.get(buffer.region, HBM)
