"""trnsim: AWS Trainium in software. See README.md for the tour."""

from trnsim import _native
from trnsim.errors import (
    ArgumentError,
    CapacityError,
    ConfigError,
    DTypeError,
    FormatError,
    HazardError,
    KernelError,
    ShapeError,
    SpecError,
    TrnsimError,
    UnsupportedError,
)

__version__ = "0.1.0"

_native.install()  # before any compiled module can be imported

__all__ = [
    "CapacityError",
    "ConfigError",
    "DTypeError",
    "FormatError",
    "HazardError",
    "ArgumentError",
    "KernelError",
    "ShapeError",
    "SpecError",
    "TrnsimError",
    "UnsupportedError",
    "__version__",
]
