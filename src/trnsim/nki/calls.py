"""Public `nl`/`nisa` calls fail as kernel errors that name the kernel's line.

`checked_calls(globals(), "nisa")` at the end of a front-end module wraps each public function
it defines, so that:
* a call Python cannot bind (an unknown keyword such as a misspelled `acumulate=` or the old API's
  `mask=`, a missing argument, one too many) raises `ArgumentError` naming the argument and
  listing the parameters the call takes, instead of a bare TypeError from inside trnsim;
* any `TrnsimError` raised inside the call without a kernel line gets the line of the kernel
  that made the call (`TrnsimError.locate`).
"""

from __future__ import annotations

import functools
import inspect

from trnsim.errors import ArgumentError, SourceLoc, TrnsimError

_OLD_API_KEYWORDS = {"mask": "mask= belongs to the old neuronxcc.nki API; in NKI 0.6 slice the tiles instead"}


def checked_calls(namespace: dict, prefix: str) -> None:
    """Wrap the public functions of a front-end module (its `globals()`) in place."""
    for name, value in list(namespace.items()):
        if (not name.startswith("_") and inspect.isfunction(value)
                and value.__module__.startswith("trnsim.nki") and not hasattr(value, "__wrapped__")):
            namespace[name] = _checked(value, f"{prefix}.{name}")


def _checked(function, call_name: str):
    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except TrnsimError as error:
            error.locate(SourceLoc.of_caller(), call_name)
            raise
        except TypeError as error:
            if error.__traceback__.tb_next is not None:  # raised inside the call: not a binding error
                raise
            raise _binding_error(function, call_name, error, kwargs) from None
    return call


def _binding_error(function, call_name: str, error: TypeError, kwargs: dict) -> ArgumentError:
    """Python's complaint about the argument list, with what the call takes."""
    parameters = ", ".join(inspect.signature(function).parameters)
    complaint = str(error).split(") ", 1)[-1]  # drop Python's "f() " prefix
    hint = next((_OLD_API_KEYWORDS[key] for key in kwargs if key in _OLD_API_KEYWORDS), None)
    return ArgumentError(f"{complaint}; it takes {parameters}", op=call_name, hint=hint)
