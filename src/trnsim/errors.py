"""The one exception family of trnsim (ARCHITECTURE.md, rule 4).

Every error trnsim raises on purpose is a `TrnsimError`. Each child also inherits the matching
built-in (`ValueError`, `TypeError`, ...) so generic handlers keep working, and carries its facts
as attributes. Errors raised on behalf of a kernel carry `where`, the user's file and line, and
their message starts with it: ``kernel.py:12 in my_kernel: nisa.nc_matmul: what is wrong``.
Each class is documented, with its cause and fix, in docs/errors.md.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A place in the user's code: the file, line and function that issued an instruction."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"

    @classmethod
    def of_caller(cls) -> SourceLoc | None:
        """The first stack frame outside the trnsim package (JAX's user-frame filter)."""
        frame = sys._getframe(1)
        while frame is not None:
            path = os.path.abspath(frame.f_code.co_filename)
            if not path.startswith(_PACKAGE_DIR) and not _is_library_frame(path):
                return cls(path, frame.f_lineno, frame.f_code.co_name)
            frame = frame.f_back
        return None


def _is_library_frame(path: str) -> bool:
    """Frames of importlib and contextlib machinery, and the `trnsim` command's launcher script,
    are never the user's line."""
    return ("<frozen " in path or path.endswith(os.sep + "contextlib.py")
            or (os.path.basename(path) == "trnsim" and path == os.path.abspath(sys.argv[0])))


class TrnsimError(Exception):
    """Base of every error trnsim raises on purpose. Catch this to catch them all.

    `where` is the kernel line the error is about (None outside a kernel) and `op` the NKI call;
    when set, the message starts with them. An error raised inside an `nl`/`nisa` call without a
    line is given the kernel's line on its way out (`locate`), so every kernel error names it.
    """

    anchor = "trnsimerror"

    def __init__(self, message: str, *, hint: str | None = None, where: SourceLoc | None = None,
                 op: str | None = None):
        self.message = message
        self.hint = hint
        self.where = where
        self.op = op
        super().__init__(self._render())

    def locate(self, where: SourceLoc | None, op: str | None = None) -> TrnsimError:
        """Attach the kernel line and the NKI call this error is about, keeping what it names
        already; an error from an instruction the call issued names both: `nisa.rand2 (nisa.rng)`.
        (An error of an instruction issued at another line, a deferred one that surfaced in this
        call, keeps its own.)"""
        issued_here = self.where is None or where is None or self.where == where
        self.where = self.where or where
        if op and not self.op:
            self.op = op
        elif op and issued_here and self.op != op and "(" not in self.op:
            self.op = f"{op} ({self.op})"
        self.args = (self._render(),)
        return self

    def _render(self) -> str:
        parts = [str(self.where)] if self.where else []
        if self.op:
            parts.append(self.op)
        text = self.message
        if self.hint:
            text += f" — {self.hint}"
        parts.append(text)
        return ": ".join(parts)


class ConfigError(TrnsimError, ValueError):
    """A setting, environment variable or command-line value is not valid.

    Example: ``TRNSIM_TARGET=trn9``. Fix: use one of the names the message lists.
    """

    anchor = "configerror"


class SpecError(TrnsimError, LookupError):
    """A hardware fact is missing, unknown, unsourced or out of range in the hardware catalog.

    Example: ``trnsim specs trn9`` or a catalog entry with a negative bandwidth. Fix: use a name
    the catalog lists, or correct the entry the message names.
    """

    anchor = "specerror"


class FormatError(TrnsimError, ValueError):
    """A number format, rounding mode, block size or sparsity pattern cannot be applied.

    Example: an MX block size of 32 on an axis of length 40. Fix: pad or choose another axis.
    """

    anchor = "formaterror"


class UnsupportedError(TrnsimError, NotImplementedError):
    """A feature trnsim does not emulate (yet), or that the chosen generation does not have.

    Example: ``nisa.quantize_mx`` on trn2. Fix: pick a target that has it or avoid the call.
    """

    anchor = "unsupportederror"

    def __init__(self, message: str, *, what: str = "", target: str | None = None, hint: str | None = None,
                 where: SourceLoc | None = None, op: str | None = None):
        self.what = what
        self.target = target
        super().__init__(message, hint=hint, where=where, op=op)


class KernelError(TrnsimError):
    """A kernel did something the chip would refuse. The message starts with the kernel's line.

    Subclasses say what kind of thing went wrong; this class is raised for the rest.
    """

    anchor = "kernelerror"

    def __init__(self, message: str, *, where: SourceLoc | None = None, op: str | None = None,
                 hint: str | None = None):
        super().__init__(message, hint=hint, op=op,
                         where=where if where is not None else SourceLoc.of_caller())


class ShapeError(KernelError, ValueError):
    """A tile shape breaks a hardware limit or does not match its partner operand.

    Example: a tile with 256 partitions (the limit is 128). Fix: split the tile.
    """

    anchor = "shapeerror"


class ArgumentError(KernelError, TypeError, ValueError):
    """An `nl`/`nisa` call got arguments it does not take: an unknown or missing keyword, a value of
    the wrong kind (None, a string or a numpy array where a tile goes), or a value out of range.

    Example: ``nisa.nc_matmul(..., acumulate=True)``. Fix: use the names and values the message lists.
    """

    anchor = "argumenterror"


class DTypeError(KernelError, TypeError):
    """A dtype is not legal for this instruction on this generation.

    Example: float8_e4m3fn in ``nc_matmul`` on trn2. Fix: use a dtype the message lists.
    """

    anchor = "dtypeerror"


class CapacityError(KernelError, MemoryError):
    """An allocation does not fit in SBUF or PSUM (or a PSUM tile crosses a bank).

    Example: 300 KiB per partition of SBUF on trn2 (224 KiB). Fix: smaller tiles or fewer live ones.
    """

    anchor = "capacityerror"

    def __init__(self, message: str, *, memory: str = "", required: int = 0, available: int = 0, **kw):
        self.memory = memory
        self.required = required
        self.available = available
        super().__init__(message, **kw)


class HazardError(KernelError):
    """Memory read before it was written (strict mode), or an access outside a tensor.

    Example: reading an SBUF tile no instruction wrote. Fix: initialise it (``nisa.memset``).
    """

    anchor = "hazarderror"


class KernelWarning(UserWarning):
    """Something the hardware leaves undefined, or answers differently from trnsim.

    Examples: accumulating onto PSUM no instruction wrote; reading a tile whose bytes another tile
    placed at the same ``address=`` overwrote. Fix: the message says which line and what to change.
    """


ALL_ERRORS = (TrnsimError, ConfigError, SpecError, FormatError, UnsupportedError, KernelError,
              ArgumentError, ShapeError, DTypeError, CapacityError, HazardError)


def reported_error(failures: dict[int, BaseException]) -> BaseException:
    """Of the errors of a launch's cores or ranks (by index), the one to raise: the lowest one's own
    error, passing over errors marked `after_peer_error` (raised only because another stopped), so
    the same kernel reports the same error in every run, whichever thread failed first."""
    return min(failures.items(), key=lambda item: (getattr(item[1], "after_peer_error", False), item[0]))[1]
