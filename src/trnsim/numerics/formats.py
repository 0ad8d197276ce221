"""Number formats as values: one `FloatFormat` description covers every float Trainium knows.

A float format is sign / exponent / mantissa bits, a bias and a rule for special codes. That is
enough to derive every figure (max, min normal, eps) and to round into it (see `engine.py`), so
cFP8's configurable split and bias are expressible as `float_format(...)` or `with_bias(...)`.

Layouts and specials: reference/numerics.md §1.2 (checked there against ml_dtypes 0.6.0 by
enumerating every code); NKI dtype names: §1.8 [N11]; Neuron's legacy E4M3 (max 240, has Inf):
§1.4 [N5][N12]; OCP formats: OCP MX v1.0 §5 [X1].
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from trnsim.errors import FormatError
from trnsim.numerics import params

SPECIALS = ("ieee", "fn", "none")
"""How the top codes are used. ieee: the all-ones exponent holds ±Inf and NaNs (overflow -> Inf).
fn ("finite"): no Inf; the all-ones code is NaN (overflow -> NaN). none: every code is a finite
number (overflow saturates to ±max; there is no NaN)."""


@dataclass(frozen=True, kw_only=True)
class FloatFormat:
    """A binary floating-point format. Values are (-1)^s * 2^(e - bias) * 1.m, with subnormals."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: str = "ieee"
    signed: bool = True
    subnormals: bool = True
    aliases: tuple[str, ...] = ()
    ml_dtypes_name: str | None = None
    torch_name: str | None = None
    nki_name: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise FormatError(f"a format's name must be a non-empty string, got {self.name!r}")
        for field in ("exponent_bits", "mantissa_bits", "bias"):  # numpy ints become ints
            value = params.integer(getattr(self, field), f"format {self.name!r}: {field}")
            object.__setattr__(self, field, value)
        for field in ("signed", "subnormals"):
            params.flag(getattr(self, field), f"format {self.name!r}: {field}")
        params.choice(self.specials, f"specials of format {self.name!r}:", SPECIALS)
        if not (1 <= self.exponent_bits <= 8 and 0 <= self.mantissa_bits <= 23):
            raise FormatError(f"format {self.name!r}: {self.exponent_bits} exponent and "
                              f"{self.mantissa_bits} mantissa bits are outside what fp32 can carry",
                              hint="exponent 1..8 bits, mantissa 0..23 bits")
        if self.specials == "fn" and self.exponent_bits + self.mantissa_bits < 2:
            raise FormatError(f"format {self.name!r} is too narrow to reserve a NaN code")
        if self.specials == "ieee" and self.mantissa_bits == 0:
            raise FormatError(f"format {self.name!r}: IEEE specials need a mantissa bit to tell NaN from Inf",
                              hint="use specials='fn' or 'none', or give it a mantissa bit")
        highest = (1 << self.exponent_bits) - (2 if self.specials == "ieee" else 1)
        if highest < (1 if self.subnormals else 0):
            held = "zero/subnormals and specials" if self.subnormals else "specials"
            raise FormatError(f"format {self.name!r} has no normal numbers: its {self.exponent_bits} "
                              f"exponent bit(s) hold only {held}",
                              hint="give it another exponent bit")
        _check_float32_holds(self)

    kind = "float"

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number."""
        return (1 if self.subnormals else 0) - self.bias

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.specials != "none"

    @property
    def overflow(self) -> str:
        """What a value beyond max becomes without saturate=True: "inf", "nan" or "saturate"."""
        return {"ieee": "inf", "fn": "nan", "none": "saturate"}[self.specials]

    @property
    def has_zero(self) -> bool:
        return self.subnormals

    @property
    def max_code(self) -> int:
        """Magnitude code (sign bit clear) of the largest finite value."""
        all_ones = (1 << (self.exponent_bits + self.mantissa_bits)) - 1
        if self.specials == "ieee":
            return all_ones - (1 << self.mantissa_bits)
        return all_ones - (1 if self.specials == "fn" else 0)

    @property
    def inf_code(self) -> int | None:
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits if self.has_inf else None

    @property
    def nan_code(self) -> int | None:
        """The quiet NaN this format writes (IEEE: all-ones exponent, top mantissa bit)."""
        if self.specials == "ieee":
            return self.inf_code | (1 << max(self.mantissa_bits - 1, 0))
        if self.specials == "fn":
            return (1 << (self.exponent_bits + self.mantissa_bits)) - 1
        return None

    @property
    def max(self) -> float:
        return _code_value(self, self.max_code)

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mantissa_bits) if self.subnormals else self.min_normal

    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next larger value."""
        return 2.0 ** -self.mantissa_bits

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype that holds values: the exact ml_dtypes/numpy dtype, else float32."""
        if self.ml_dtypes_name is None:
            return np.dtype(np.float32)
        return np.dtype(getattr(ml_dtypes, self.ml_dtypes_name, None) or self.ml_dtypes_name)

    @property
    def code_dtype(self) -> np.dtype:
        """Unsigned integer dtype wide enough for one code."""
        return np.dtype(np.uint8 if self.bits <= 8 else np.uint16 if self.bits <= 16 else np.uint32)


INT_BITS = (1, 8, 16, 32)  # the integer widths numpy holds and NKI names (1: bool_)


@dataclass(frozen=True, kw_only=True)
class IntFormat:
    """A two's-complement or unsigned integer format (bool_ is a 1-bit unsigned one)."""

    name: str
    bits: int
    signed: bool
    aliases: tuple[str, ...] = ()
    torch_name: str | None = None
    nki_name: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "bits", params.integer(self.bits, f"format {self.name!r}: bits"))
        params.flag(self.signed, f"format {self.name!r}: signed")
        if self.bits not in INT_BITS or (self.bits == 1 and self.signed):
            kind = "signed" if self.signed else "unsigned"
            raise FormatError(f"format {self.name!r}: no {kind} {self.bits}-bit integer type",
                              hint=f"bits is one of {INT_BITS} (1: unsigned)")

    kind = "int"

    @property
    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def min(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def numpy_dtype(self) -> np.dtype:
        if self.bits == 1:
            return np.dtype(np.bool_)
        return np.dtype(f"{'' if self.signed else 'u'}int{self.bits}")


FLOAT32_MAX_EXPONENT = 127  # IEEE 754 binary32: largest finite value (2 - 2^-23) * 2^127
FLOAT32_MIN_QUANTUM_EXPONENT = -149  # its smallest subnormal, 2^-149


def _check_float32_holds(fmt: FloatFormat) -> None:
    """Refuse a format whose values float32 cannot all hold exactly (they are computed and held in
    float32): a max beyond float32's, or a spacing finer than float32's smallest subnormal."""
    top_field = fmt.max_code >> fmt.mantissa_bits
    top_exponent = max(top_field, 1 if fmt.subnormals else 0) - fmt.bias
    if top_exponent > FLOAT32_MAX_EXPONENT:
        raise FormatError(f"format {fmt.name!r}: its largest exponent, 2^{top_exponent}, is beyond "
                          f"float32's largest, 2^{FLOAT32_MAX_EXPONENT}",
                          hint=f"raise the bias to at least {fmt.bias + top_exponent - FLOAT32_MAX_EXPONENT}")
    finest = fmt.emin - fmt.mantissa_bits
    if finest < FLOAT32_MIN_QUANTUM_EXPONENT:
        highest_bias = fmt.bias + finest - FLOAT32_MIN_QUANTUM_EXPONENT
        raise FormatError(f"format {fmt.name!r}: its smallest spacing 2^{finest} is below float32's "
                          f"smallest subnormal 2^{FLOAT32_MIN_QUANTUM_EXPONENT}",
                          hint=f"lower the bias to at most {highest_bias}")


def _code_value(fmt: FloatFormat, code: int) -> float:
    """Value of one finite magnitude code (no sign, no specials): the scalar twin of decode()."""
    field, mant = code >> fmt.mantissa_bits, code & ((1 << fmt.mantissa_bits) - 1)
    if fmt.subnormals and field == 0:
        return mant * 2.0 ** (fmt.emin - fmt.mantissa_bits)
    lead = 1 << fmt.mantissa_bits
    return (lead + mant) * 2.0 ** (field - fmt.bias - fmt.mantissa_bits)


def float_format(*, exponent_bits: int, mantissa_bits: int, bias: int | None = None,
                 specials: str = "ieee", name: str | None = None) -> FloatFormat:
    """A custom float format, e.g. cFP8 with an adjusted bias: values are held in float32, so
    its max and its smallest spacing must be float32 numbers (FormatError otherwise)."""
    exponent_bits = params.integer(exponent_bits, "exponent_bits", minimum=1, maximum=8)
    mantissa_bits = params.integer(mantissa_bits, "mantissa_bits", minimum=0, maximum=23)
    bias = (1 << (exponent_bits - 1)) - 1 if bias is None else params.integer(bias, "bias")
    if name is None:
        name = f"float{1 + exponent_bits + mantissa_bits}_e{exponent_bits}m{mantissa_bits}_b{bias}"
    return FloatFormat(name=name, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits,
                       bias=bias, specials=specials)


def with_bias(fmt: FloatFormat, bias: int) -> FloatFormat:
    """The same format with another exponent bias (Trn2's adjustable cFP8 bias, §1.3)."""
    fmt = get_float_format(fmt)
    bias = params.integer(bias, "bias")
    if bias == fmt.bias:
        return fmt
    return dataclasses.replace(fmt, name=f"{fmt.name}_bias{bias}", bias=bias, aliases=(),
                               ml_dtypes_name=None, torch_name=None, nki_name=None)


def _f(name, e, m, bias, specials="ieee", aliases=(), ml=None, torch=None, nki=None, **kw):
    return FloatFormat(name=name, exponent_bits=e, mantissa_bits=m, bias=bias, specials=specials,
                       aliases=aliases, ml_dtypes_name=ml, torch_name=torch, nki_name=nki, **kw)


def _i(name, bits, signed, aliases=(), torch=None):
    return IntFormat(name=name, bits=bits, signed=signed, aliases=aliases, torch_name=torch, nki_name=name)


FORMATS: dict[str, FloatFormat | IntFormat] = {f.name: f for f in (
    _f("float32", 8, 23, 127, aliases=("fp32", "f32", "float"), ml="float32", torch="float32", nki="float32"),
    _f("tfloat32", 8, 10, 127, aliases=("tf32",), nki="tfloat32"),
    _f("bfloat16", 8, 7, 127, aliases=("bf16",), ml="bfloat16", torch="bfloat16", nki="bfloat16"),
    _f("float16", 5, 10, 15, aliases=("fp16", "f16", "half"), ml="float16", torch="float16",
       nki="float16"),
    # Neuron's "legacy" IEEE-like E4M3 of Trn1/Trn2: bias 7, Inf at S.1111.000, max 240 (§1.4).
    _f("float8_e4m3", 4, 3, 7, aliases=("fp8_e4m3", "e4m3"), ml="float8_e4m3", nki="float8_e4m3"),
    # OCP E4M3FN (Trn3): no Inf, NaN = S.1111.111, max 448.
    _f("float8_e4m3fn", 4, 3, 7, "fn", aliases=("fp8_e4m3fn", "e4m3fn"), ml="float8_e4m3fn",
       torch="float8_e4m3fn", nki="float8_e4m3fn"),
    _f("float8_e5m2", 5, 2, 15, aliases=("fp8_e5m2", "e5m2"), ml="float8_e5m2", torch="float8_e5m2",
       nki="float8_e5m2"),
    # cFP8 E3M4: layout documented by Neuron, bias/specials not; ml_dtypes' IEEE-like bias 3 (§1.3).
    _f("float8_e3m4", 3, 4, 3, aliases=("fp8_e3m4", "e3m4"), ml="float8_e3m4"),
    _f("float6_e2m3fn", 2, 3, 1, "none", aliases=("fp6_e2m3", "e2m3"), ml="float6_e2m3fn"),
    _f("float6_e3m2fn", 3, 2, 3, "none", aliases=("fp6_e3m2", "e3m2"), ml="float6_e3m2fn"),
    _f("float4_e2m1fn", 2, 1, 1, "none", aliases=("fp4_e2m1", "fp4", "e2m1"), ml="float4_e2m1fn"),
    # E8M0 MX scale: unsigned powers of two 2^-127..2^127, no zero, NaN = 0xFF (OCP MX §5.4.1).
    _f("float8_e8m0fnu", 8, 0, 127, "fn", aliases=("e8m0", "fp8_e8m0"), ml="float8_e8m0fnu",
       torch="float8_e8m0fnu", nki="float8_e8m0fnu", signed=False, subnormals=False),
    _i("int8", 8, True, torch="int8"), _i("uint8", 8, False, torch="uint8"),
    _i("int16", 16, True, torch="int16"), _i("uint16", 16, False, torch="uint16"),
    _i("int32", 32, True, torch="int32"), _i("uint32", 32, False, torch="uint32"),
    _i("bool_", 1, False, aliases=("bool",), torch="bool"),
)}

_BY_NAME = {alias: fmt for fmt in FORMATS.values() for alias in (fmt.name, *fmt.aliases)}


def get_format(spec) -> FloatFormat | IntFormat:
    """The format named by a string, a numpy/ml_dtypes dtype, a torch dtype or a format value.

    >>> get_format("bf16").max
    3.3895313892515355e+38
    """
    if isinstance(spec, FloatFormat | IntFormat):
        return spec
    if isinstance(spec, str):
        key = spec.strip().lower()
    elif type(spec).__module__ == "torch" and type(spec).__name__ == "dtype":
        key = str(spec).removeprefix("torch.")  # numerics never imports torch itself
    else:
        try:  # dtypes and scalar types only: np.dtype() would also read None (float64) or a value
            key = np.dtype(spec).name if isinstance(spec, np.dtype | type) else None
        except (TypeError, ValueError):
            key = None
        if key is None:
            raise FormatError(f"{params.shown(spec)} ({type(spec).__name__}) does not name a number format",
                              hint="pass a format name such as 'bfloat16', or a dtype")
    fmt = _BY_NAME.get(key)
    if fmt is None:
        raise FormatError(f"unknown number format {key!r}", hint=f"known: {', '.join(FORMATS)}")
    return fmt


def get_float_format(spec, what: str = "fmt") -> FloatFormat:
    """get_format(spec) where only a float format will do (codes and rounding need one)."""
    fmt = get_format(spec)
    if not isinstance(fmt, FloatFormat):
        raise FormatError(f"{what} must be a float format, got the integer format {fmt.name}")
    return fmt
