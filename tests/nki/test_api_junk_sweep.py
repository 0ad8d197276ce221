"""Every public `nisa` and `nl` function, with a wrong value in one argument at a time (the others
plausible): the call runs or raises a TrnsimError; no other exception ever escapes. The sweep found
`name=`, `dtype=`, `buffer=`, `keepdims=`, `engine=`, `reduce_cmd=`, `transpose_x=` and nl.ndarray's
`address=` letting numpy's ValueError / TypeError through, and nl.while_loop calling a non-function."""

import inspect

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import TrnsimError

JUNK = (None, "x", 1e39, float("nan"), np.ones(3, np.float32), (1, 2), object(), -1, 0, True, [None])
"""Values that are wrong for most parameters (and right for a few, which then simply run)."""
TILE_NAMES = {"dst", "data", "src", "data0", "data1", "data2", "x", "y", "stationary", "moving",
              "on_true_tile", "predicate", "on_true"}


def _plausible(parameter: inspect.Parameter, tile):
    """A value of the kind the parameter's name says, for the arguments that are not being spoiled."""
    if parameter.name in TILE_NAMES:
        return tile()
    return {"op": nl.add, "op0": nl.add, "op1": nl.add, "reduce_op": nl.add, "shape": (8, 8),
            "dtype": nl.float32, "axis": 1}.get(parameter.name, 1.0)


def _functions():
    for prefix, module in (("nisa", nisa), ("nl", nl)):
        for name in sorted(dir(module)):
            function = getattr(module, name)
            if name.startswith("_") or inspect.isclass(function) or not callable(function):
                continue
            try:
                signature = inspect.signature(function)
            except (TypeError, ValueError):
                continue
            yield f"{prefix}.{name}", function, [p for p in signature.parameters.values()
                                                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _spoiled_call(function, parameters, spoiled, junk):
    """A kernel calling `function` with `junk` as `spoiled` and plausible required arguments."""
    def kernel(a):
        def tile():
            t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=t, value=1.0)
            return t
        function(**{p.name: junk if p is spoiled else _plausible(p, tile) for p in parameters
                    if p is spoiled or p.default is inspect.Parameter.empty})
        return a
    return kernel


@pytest.mark.parametrize("name,function,parameters", list(_functions()),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_a_wrong_argument_raises_a_trnsim_error_or_runs(name, function, parameters):
    escaped = []
    for spoiled in parameters:
        for junk in JUNK:
            try:
                nki.simulate(_spoiled_call(function, parameters, spoiled, junk))(np.ones((8, 8), np.float32))
            except TrnsimError:
                pass
            except Exception as error:  # noqa: BLE001 - what the test looks for
                escaped.append(f"{spoiled.name}={junk!r:.20}: {type(error).__name__}: {error}"[:200])
    assert not escaped, f"{name}:\n" + "\n".join(escaped)
