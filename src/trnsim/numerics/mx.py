"""OCP Microscaling (MX) block formats: blocks of 32 elements sharing one E8M0 power-of-two scale.

value = 2^scale_exponent * element. The scale rule is a parameter (reference §3.2):
  "ocp"       floor(log2 amax) - emax_elem          (OCP MX v1.0 §6.3, microxcaling, AWS golden)
  "round_up"  ceil(log2(amax / max_elem))           (RCEIL: NVIDIA TE, torchao; never clamps)
  "trainium"  floor(log2 amax) - (emax_elem - 1)    (Trn3 nisa.quantize_mx: 2x the OCP scale) [N8]
Elements are clamped to ±max_elem, then rounded (RNE or stochastic). A block holding NaN or ±Inf
gets the NaN scale (0xFF) and dequantises to NaN; an all-zero block gets 2^-127 (code 0x00).
MXINT8 elements are int8 with an implicit 2^-6 (range ±127/64; -128 is never written).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.errors import FormatError
from trnsim.numerics import params
from trnsim.numerics.cast import ROUNDINGS, as_float32, cast, to_codes
from trnsim.numerics.formats import FloatFormat, get_format

E8M0_BIAS = 127  # OCP MX v1.0 §5.4.1: scale exponents -127..127, code 255 = NaN
E8M0_NAN = 0xFF
MXINT8_FRACTION_BITS = 6  # OCP MX v1.0 §5.2: INT8 elements carry an implicit 2^-6
DEFAULT_BLOCK = 32  # OCP MX v1.0 §5.2 Table 1 (k = 32 for every concrete format)


@dataclass(frozen=True, kw_only=True)
class MXFormat:
    """One MX element type: its element format (None for MXINT8) and its largest element."""

    name: str
    element: FloatFormat | None
    aliases: tuple[str, ...] = ()

    @property
    def max_element(self) -> float:
        if self.element is None:
            return 127 / 2**MXINT8_FRACTION_BITS
        return self.element.max

    @property
    def emax(self) -> int:
        """Exponent of the largest element (8 for E4M3, 15 for E5M2, 0 for INT8)."""
        return int(np.floor(np.log2(self.max_element)))

    @property
    def element_dtype(self) -> np.dtype:
        return np.dtype(np.int8) if self.element is None else self.element.numpy_dtype


_E8M0_DTYPE = get_format("float8_e8m0fnu").numpy_dtype

MX_FORMATS = {f.name: f for f in (
    MXFormat(name="mxfp8_e4m3", element=get_format("float8_e4m3fn"), aliases=("mxfp8",)),
    MXFormat(name="mxfp8_e5m2", element=get_format("float8_e5m2")),
    MXFormat(name="mxfp6_e2m3", element=get_format("float6_e2m3fn"), aliases=("mxfp6",)),
    MXFormat(name="mxfp6_e3m2", element=get_format("float6_e3m2fn")),
    MXFormat(name="mxfp4_e2m1", element=get_format("float4_e2m1fn"), aliases=("mxfp4",)),
    MXFormat(name="mxint8", element=None),
)}
_MX_BY_NAME = {alias: f for f in MX_FORMATS.values() for alias in (f.name, *f.aliases)}


def get_mx_format(spec) -> MXFormat:
    if isinstance(spec, MXFormat):
        return spec
    fmt = _MX_BY_NAME.get(str(spec).strip().lower())
    if fmt is None:
        raise FormatError(f"unknown MX format {spec!r}", hint=f"known: {', '.join(MX_FORMATS)}")
    return fmt


def _floor_log2(amax: np.ndarray) -> np.ndarray:
    return np.frexp(amax)[1].astype(np.int64) - 1  # exact, float32 subnormals included


def _ocp(amax, fmt: MXFormat):
    return _floor_log2(amax) - fmt.emax


def _round_up(amax, fmt: MXFormat):
    mantissa, exponent = np.frexp(amax.astype(np.float64) / fmt.max_element)
    return exponent.astype(np.int64) - (mantissa == 0.5)


def _trainium(amax, fmt: MXFormat):
    return _floor_log2(amax) - (fmt.emax - 1)


SCALE_RULES = {"ocp": _ocp, "round_up": _round_up, "trainium": _trainium}


@dataclass(frozen=True, kw_only=True, eq=False)
class MXArray:
    """A quantised tensor: `elements` (the original shape, element dtype) and `scales` (E8M0, one
    per block; the blocked axis shrinks by `block`)."""

    format: MXFormat
    elements: np.ndarray
    scales: np.ndarray
    axis: int
    block: int

    def __post_init__(self):
        """Refuse fields that disagree: dequantize_mx would otherwise broadcast or misread them."""
        if not isinstance(self.format, MXFormat):
            raise FormatError(f"MXArray format must be an MXFormat, got {params.shown(self.format)}",
                              hint="use get_mx_format(name)")
        elements = params.stored_array(self.elements, "MXArray elements")
        scales = params.stored_array(self.scales, "MXArray scales")
        if elements.dtype != self.format.element_dtype:
            raise FormatError(f"MXArray elements of {self.format.name} must have dtype "
                              f"{self.format.element_dtype}, got {elements.dtype}")
        if scales.dtype not in (_E8M0_DTYPE, np.uint8):
            raise FormatError(f"MXArray scales must be E8M0 codes (float8_e8m0fnu or uint8), "
                              f"got {scales.dtype}")
        axis, block = _check_layout(elements.shape, self.axis, self.block)
        blocks_shape = elements.shape[:axis] + (elements.shape[axis] // block,) + elements.shape[axis + 1:]
        if scales.shape != blocks_shape:
            raise FormatError(f"MXArray scales has shape {scales.shape}, but elements {elements.shape} in "
                              f"blocks of {block} along axis {axis} need one scale per block: {blocks_shape}")

    @property
    def scale_exponents(self) -> np.ndarray:
        """Scale exponents as ints; NaN scales read as 128."""
        return self.scales.view(np.uint8).astype(np.int64) - E8M0_BIAS


def _blocked(x: np.ndarray, axis: int, block: int) -> np.ndarray:
    """View with the axis moved last and split into (blocks, block)."""
    moved = np.moveaxis(x, axis, -1)
    return moved.reshape(*moved.shape[:-1], moved.shape[-1] // block, block)


def _check_layout(shape: tuple, axis, block) -> tuple[int, int]:
    axis = params.axis(axis, shape)
    block = params.integer(block, "block", minimum=1)
    if shape[axis] % block:
        raise FormatError(f"MX block size {block} does not divide axis {axis} of length {shape[axis]}",
                          hint="pad the axis to a multiple of the block size, or choose another axis")
    return axis, block


def quantize_mx(x, fmt="mxfp8_e4m3", *, axis: int = -1, block: int = DEFAULT_BLOCK,
                scale_rule: str = "ocp", rounding: str = "nearest", seed=None) -> MXArray:
    """Quantise float data to MX along `axis` (the contraction axis), one scale per `block`."""
    fmt = get_mx_format(fmt)
    arr = params.array(x, "x")
    if arr.dtype.kind != "f" and not (arr.dtype.kind == "V" and arr.dtype.name.startswith(("float", "bf"))):
        raise FormatError(f"MX quantisation needs float input, got x of dtype {arr.dtype}")
    rule = SCALE_RULES[params.choice(scale_rule, "MX scale rule", SCALE_RULES)]
    params.choice(rounding, "rounding", ROUNDINGS)
    seed = params.seed(seed)
    axis, block = _check_layout(arr.shape, axis, block)
    blocks = _blocked(as_float32(arr), axis, block)
    amax = np.max(np.abs(blocks), axis=-1)
    finite = np.isfinite(amax)  # max() propagates NaN, and Inf is its own max
    safe_amax = np.where(finite & (amax > 0), amax, np.float32(1))
    exponent = np.clip(rule(safe_amax, fmt), -E8M0_BIAS, E8M0_BIAS)
    exponent = np.where(amax > 0, exponent, -E8M0_BIAS)
    # Multiplying by an exact power of two is exact (2^-127..2^127 are all float32 numbers).
    factor = np.ldexp(np.float32(1), (-exponent).astype(np.int32))[..., None]
    scaled = np.zeros(blocks.shape, np.float32)  # blocks with NaN/Inf keep zeros: their scale says NaN
    np.multiply(blocks, factor, out=scaled, where=finite[..., None])
    scaled = np.clip(scaled, -fmt.max_element, fmt.max_element, out=scaled)
    elements = _round_elements(scaled, fmt, rounding, seed)
    codes = np.where(finite, exponent + E8M0_BIAS, E8M0_NAN).astype(np.uint8)
    shape = np.moveaxis(arr, axis, -1).shape
    return MXArray(format=fmt, elements=np.moveaxis(elements.reshape(shape), -1, axis),
                   scales=np.moveaxis(codes.view(_E8M0_DTYPE), -1, axis),
                   axis=axis, block=block)


def _round_elements(scaled: np.ndarray, fmt: MXFormat, rounding: str, seed) -> np.ndarray:
    if fmt.element is not None:
        return cast(scaled, fmt.element, rounding=rounding, seed=seed, saturate=True)
    ints = cast(scaled * np.float32(2**MXINT8_FRACTION_BITS), "int8", rounding=rounding, seed=seed)
    return np.maximum(ints, -127).astype(np.int8)


def e8m0_factors(codes: np.ndarray) -> np.ndarray:
    """float32 2^(code - 127) for each E8M0 scale code (uint8 or float8_e8m0fnu), NaN for 0xFF."""
    codes = params.array(codes, "codes")
    if codes.dtype == _E8M0_DTYPE:
        codes = codes.view(np.uint8)
    codes = params.integer_array(codes, "codes", minimum=0, maximum=E8M0_NAN)
    exponents = codes.astype(np.int64) - E8M0_BIAS
    return np.where(exponents == E8M0_NAN - E8M0_BIAS, np.float32(np.nan),
                    np.ldexp(np.float32(1), np.minimum(exponents, E8M0_BIAS).astype(np.int32)))


def dequantize_mx(mx: MXArray) -> np.ndarray:
    """float32 values of an MXArray (exact: element times a power of two, NaN for NaN scales)."""
    if not isinstance(mx, MXArray):
        raise FormatError(f"mx must be an MXArray (from quantize_mx), got {type(mx).__name__}")
    values = mx.elements.astype(np.float32)
    if mx.format.element is None:
        values = values / np.float32(2**MXINT8_FRACTION_BITS)
    blocks = _blocked(values, mx.axis, mx.block)
    factor = e8m0_factors(np.moveaxis(mx.scales.view(np.uint8), mx.axis, -1)[..., None])
    out = np.multiply(blocks, factor, dtype=np.float32)
    moved = out.reshape(*out.shape[:-2], out.shape[-2] * out.shape[-1])
    return np.moveaxis(moved, -1, mx.axis).astype(np.float32)


X4_LAYOUTS = {"float8_e4m3fn": np.uint32, "float8_e5m2": np.uint32, "float4_e2m1fn": np.uint16}
"""Trn3's packed x4 types (four elements per word, element 0 in the lowest bits) [N11][N15]."""


def _x4_word(fmt) -> tuple[FloatFormat, np.dtype]:
    """The element format and the word dtype of its x4 packed type."""
    fmt = get_format(fmt)
    word = X4_LAYOUTS.get(fmt.name)
    if word is None:
        raise FormatError(f"there is no x4 packed type for {fmt.name}", hint=f"use one of {list(X4_LAYOUTS)}")
    return fmt, np.dtype(word)


def pack_x4(values, fmt, axis: int = -1) -> np.ndarray:
    """Pack four consecutive elements along `axis` into one word (uint32 for FP8, uint16 for FP4),
    like NKI's float8_e4m3fn_x4 / float8_e5m2_x4 / float4_e2m1fn_x4."""
    arr = params.real_array(values, "values")
    fmt, word = _x4_word(fmt)
    axis = params.axis(axis, arr.shape)
    if arr.shape[axis] % 4:
        raise FormatError(f"x4 packing needs an axis length divisible by 4, got {arr.shape[axis]}")
    codes = np.moveaxis(to_codes(arr, fmt).astype(word), axis, -1)
    groups = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 4, 4)
    packed = np.zeros(groups.shape[:-1], word)
    for i in range(4):
        packed |= groups[..., i] << word.type(fmt.bits * i)
    return np.moveaxis(packed, -1, axis)


def unpack_x4(packed, fmt, axis: int = -1) -> np.ndarray:
    """The inverse of pack_x4: an array of the element dtype, four times longer along `axis`."""
    fmt, word = _x4_word(fmt)
    arr = params.integer_array(packed, "packed", minimum=0, maximum=np.iinfo(word).max)
    axis = params.axis(axis, arr.shape)
    moved = np.moveaxis(arr.astype(word), axis, -1)
    mask = word.type((1 << fmt.bits) - 1)
    parts = [(moved >> word.type(fmt.bits * i)) & mask for i in range(4)]
    codes = np.stack(parts, axis=-1).reshape(*moved.shape[:-1], 4 * moved.shape[-1]).astype(fmt.code_dtype)
    return np.moveaxis(codes.view(fmt.numpy_dtype), -1, axis)
