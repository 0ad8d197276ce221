"""Units: converting figures as sources write them into SI, and formatting SI values for people.

The data files may write `{ value = 820, unit = "GiB/s", ... }`; the loader multiplies by the
unit's factor. Binary prefixes (KiB, MiB, GiB) are powers of 1024, decimal ones (KB, GB, TB/s) of
1000; "Gbps" is gigabits per second, i.e. 125,000,000 bytes per second per Gbps.
"""

from __future__ import annotations

from fractions import Fraction

# unit -> (dimension, factor to SI). Factors are exact (int or Fraction) so integral inputs stay exact.
UNITS: dict[str, tuple[str, int | Fraction]] = {
    "B": ("bytes", 1),
    "KiB": ("bytes", 2**10),
    "MiB": ("bytes", 2**20),
    "GiB": ("bytes", 2**30),
    "TiB": ("bytes", 2**40),
    "KB": ("bytes", 10**3),
    "MB": ("bytes", 10**6),
    "GB": ("bytes", 10**9),
    "TB": ("bytes", 10**12),
    "B/s": ("bytes_per_s", 1),
    "B/ns": ("bytes_per_s", 10**9),
    "GB/s": ("bytes_per_s", 10**9),
    "TB/s": ("bytes_per_s", 10**12),
    "GiB/s": ("bytes_per_s", 2**30),
    "Gbps": ("bytes_per_s", 10**9 // 8),
    "Hz": ("hz", 1),
    "MHz": ("hz", 10**6),
    "GHz": ("hz", 10**9),
    "FLOPS": ("flops", 1),
    "TFLOPS": ("flops", 10**12),
    "PFLOPS": ("flops", 10**15),
    "s": ("s", 1),
    "ms": ("s", Fraction(1, 10**3)),
    "us": ("s", Fraction(1, 10**6)),
    "ns": ("s", Fraction(1, 10**9)),
}

INTEGRAL = frozenset({"bytes", "count"})
"""Dimensions whose SI values must be whole numbers."""


def to_si(value: int | float, unit: str) -> tuple[str, int | float]:
    """(dimension, SI value) of `value` written in `unit`; KeyError for an unknown unit."""
    dimension, factor = UNITS[unit]
    if isinstance(value, int) and isinstance(factor, int):
        return dimension, value * factor
    # Go through Fraction so 2.9 TB/s becomes exactly 2.9e12, not 2900000000000.0002.
    return dimension, float(Fraction(str(value)) * factor)


_DECIMAL = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"))
_BINARY = ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))


def _number(value: float) -> str:
    """Up to four significant digits, no trailing zeros."""
    return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def _scaled(value: float, suffix: str) -> str:
    for factor, prefix in _DECIMAL:
        if abs(value) >= factor:
            return f"{_number(value / factor)} {prefix}{suffix}"
    return f"{_number(value)} {suffix}"


def format_bytes(value: int) -> str:
    """Binary prefixes when the size is a whole number of KiB/MiB/... (192 KiB), else decimal (640 GB)."""
    for factor, prefix in _BINARY:
        if value >= factor and value % factor == 0 and value // factor < 10**5:
            return f"{_number(value / factor)} {prefix}B"
    return _scaled(value, "B")


def format_seconds(value: float) -> str:
    for factor, suffix in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= factor:
            return f"{_number(value / factor)} {suffix}"
    return f"{_number(value / 1e-9)} ns"


def format_value(value: object, dimension: str) -> str:
    """A short human form of an SI value of the given dimension ("2.9 TB/s", "96 GiB")."""
    if value is None:
        return "—"
    if dimension == "bytes":
        return format_bytes(value)
    if dimension == "bytes_per_s":
        return _scaled(value, "B/s")
    if dimension == "hz":
        return _scaled(value, "Hz")
    if dimension == "flops":
        return _scaled(value, "FLOPS")
    if dimension == "s":
        return format_seconds(value)
    if dimension == "usd_per_hour":
        return f"${value:,.4g}/h"
    if dimension == "names":
        return ", ".join(sorted(value))
    if dimension == "counts":
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return _number(value)
    return str(value)
