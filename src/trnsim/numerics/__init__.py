"""Number formats and rounding (pure numpy, no kernel knowledge). Tour: docs/numerics.md."""

from trnsim.numerics.cast import (
    as_float32,
    cast,
    default_rounding,
    from_codes,
    random_stream,
    stochastic_seed,
    to_codes,
)
from trnsim.numerics.engine import decode, encode
from trnsim.numerics.formats import FORMATS, FloatFormat, IntFormat, float_format, get_format, with_bias

__all__ = [
    "FORMATS",
    "FloatFormat",
    "IntFormat",
    "as_float32",
    "cast",
    "decode",
    "default_rounding",
    "encode",
    "float_format",
    "from_codes",
    "get_format",
    "random_stream",
    "stochastic_seed",
    "to_codes",
    "with_bias",
]
