"""Public `nl`/`nisa` calls fail as kernel errors that name the kernel's line.

`checked_calls(globals(), "nisa")` at the end of a front-end module wraps each public function
it defines, so that:
* a call Python cannot bind (an unknown keyword such as a misspelled `acumulate=` or the old API's
  `mask=`, a missing argument, one too many) raises `ArgumentError` naming the argument and
  listing the parameters the call takes, instead of a bare TypeError from inside trnsim;
* an argument whose name says what it is (`NISA_ARGUMENTS`, `NL_ARGUMENTS`: a tile, an integer,
  axes) but that is something else (None where None is not its default, a string, a numpy array)
  raises `ArgumentError` naming it, before the call looks at it;
* any `TrnsimError` raised inside the call without a kernel line gets the line of the kernel
  that made the call (`TrnsimError.locate`).
"""

from __future__ import annotations

import enum
import functools
import inspect
from numbers import Integral, Real

import numpy as np

from trnsim.core.isa import Engine
from trnsim.errors import ArgumentError, SourceLoc, TrnsimError
from trnsim.nki import dtypes
from trnsim.nki.tensor import NkiTensor

_OLD_API_KEYWORDS = {"mask": "mask= belongs to the old neuronxcc.nki API; in NKI 0.6 slice the tiles instead"}


def _is_tile(value) -> bool:
    return isinstance(value, NkiTensor)


def _is_integer(value) -> bool:
    """An int, a numpy integer, or a VirtualRegister (its value is read when it is used)."""
    if type(value) is int:  # the common case, without the abstract-class check
        return True
    return (isinstance(value, Integral) and not isinstance(value, bool)) or hasattr(value, "read_value")


def is_tile_or_number(value) -> bool:
    return _is_tile(value) or (isinstance(value, Real) and not isinstance(value, bool))


def _is_integers(value) -> bool:
    """An integer, or a tuple or list of them (axes, a shape)."""
    if type(value) is tuple and all(type(item) is int for item in value):
        return True
    return _is_integer(value) or (isinstance(value, tuple | list) and all(map(_is_integer, value)))


def _is_name(value) -> bool:
    return value is None or isinstance(value, str)


def is_option(value) -> bool:
    """An enum member (nisa.engine.vector, nisa.reduce_cmd.reduce) or its string value; which
    members are legal is the instruction contract's business (core/isa.py)."""
    return isinstance(value, enum.Enum | str)


def _is_bool(value) -> bool:
    return isinstance(value, bool | np.bool_)


def _is_dtype(value) -> bool:
    """A dtype trnsim knows (else dtypes.dtype raises the DTypeError that lists them)."""
    dtypes.dtype(value)
    return True


TILE = (_is_tile, "a tile (an nl.ndarray or a view of one)")
INTEGER = (_is_integer, "an integer")
TILE_OR_NUMBER = (is_tile_or_number, "a tile or a number")
AXES = (_is_integers, "an axis or a tuple of axes (integers)")
SHAPE = (_is_integers, "a shape (a tuple of integers)")
NAME = (_is_name, "a string")
ENGINE = (is_option, f"one of {sorted(engine.value for engine in Engine)} (nisa.engine.*)")
REDUCE_CMD = (is_option, "a nisa.reduce_cmd member (idle, reset, reduce, reset_reduce, load_reduce)")
BOOL = (_is_bool, "True or False")
DTYPE = (_is_dtype, "a dtype")
BUFFER = (lambda value: isinstance(value, dtypes.MemoryRegion),
          "a memory region (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or nl.private_hbm)")
FUNCTION = (callable, "a function")

NISA_ARGUMENTS = {name: TILE for name in (
    "dst", "src", "data", "data0", "data1", "data2", "stationary", "moving", "stationary_scale",
    "moving_scale", "predicate", "on_true_tile", "on_true", "vals", "indices", "index", "src_buffer",
    "segment_ids", "dst_idx", "reduce_res", "dst_scale", "val_dst", "idx_dst")} | {"n": INTEGER} | {
    "name": NAME, "engine": ENGINE, "reduce_cmd": REDUCE_CMD}
"""What the `nisa` arguments of these names are, in every call that has them."""
NL_ARGUMENTS = {name: TILE for name in ("x", "y", "src", "dst", "data", "indices", "condition", "w",
                                         "value")} | {
    name: INTEGER for name in ("start", "stop", "step", "lower", "upper", "n", "size")} | {
    "axis": AXES, "shape": SHAPE, "name": NAME, "dtype": DTYPE, "buffer": BUFFER, "keepdims": BOOL,
    "transpose_x": BOOL, "body_fun": FUNCTION}
"""What the `nl` arguments of these names are; a function lists in `scalar_arguments` those of its
arguments that may also be numbers (`nl.add(x, 2.0)`)."""


def checked_calls(namespace: dict, prefix: str, kinds: dict | None = None,
                  helpers: tuple[str, ...] = ()) -> None:
    """Wrap the public functions of a front-end module (its `globals()`) in place; arguments named
    in `kinds` must be of that kind. Functions from the `helpers` modules are the module's own
    tools, imported for its use, not calls of the API: they are left as they are."""
    for name, value in list(namespace.items()):
        if (not name.startswith("_") and inspect.isfunction(value) and value.__module__ not in helpers
                and value.__module__.startswith("trnsim.nki") and not hasattr(value, "checked_call")):
            namespace[name] = _checked(value, f"{prefix}.{name}", kinds or {})


def _checked(function, call_name: str, kinds: dict):
    parameters = inspect.signature(function).parameters
    scalars = getattr(function, "scalar_arguments", ())
    checks = tuple((index, name, parameters[name].default is None,
                    TILE_OR_NUMBER if name in scalars else kinds[name])
                   for index, name in enumerate(parameters) if name in kinds)

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            for index, name, may_be_none, (valid, what) in checks:
                value = args[index] if index < len(args) else kwargs.get(name, _ABSENT)
                if value is _ABSENT or (value is None and may_be_none) or valid(value):
                    continue
                raise ArgumentError(f"{name} is {describe(value)}; it must be {what}", op=call_name)
            return function(*args, **kwargs)
        except TrnsimError as error:
            error.locate(SourceLoc.of_caller(), call_name)
            raise
        except TypeError:
            mistake = _binding_error(function, call_name, args, kwargs)
            if mistake is None:  # the arguments bind: the TypeError came from inside the call
                raise
            raise mistake from None
    call.checked_call = call_name
    return call


_ABSENT = object()


def describe(value) -> str:
    """A value given where a tile goes, as the user would recognise it."""
    if value is None:
        return "None"
    kind = type(value)
    if kind.__name__ in ("ndarray", "Tensor"):
        return f"a {kind.__module__.split('.')[0]} array (kernel inputs are HBM tensors; copy them on chip)"
    return f"{value!r}"[:60] if isinstance(value, str | int | float) else f"a {kind.__name__}"


def _binding_error(function, call_name: str, args: tuple, kwargs: dict) -> ArgumentError | None:
    """Python's complaint about the argument list, with what the call takes (None if they bind)."""
    signature = inspect.signature(function)
    unknown = [key for key in kwargs if key not in signature.parameters]
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        complaint = f"got an unexpected keyword argument {unknown[0]!r}" if unknown else str(error)
    else:
        return None
    parameters = ", ".join(signature.parameters)
    hint = next((_OLD_API_KEYWORDS[key] for key in kwargs if key in _OLD_API_KEYWORDS), None)
    return ArgumentError(f"{complaint}; it takes {parameters}", op=call_name, hint=hint)
