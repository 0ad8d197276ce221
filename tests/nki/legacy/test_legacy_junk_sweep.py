"""Every public call of the old API's `nl` and `nisa`, with a wrong value in one argument at a time:
the kernel runs or raises a TrnsimError; no other exception escapes. The sweep found None, strings,
numpy arrays and the like reaching numpy or attribute lookups in 95 (call, argument, exception)
cases: tiles, dtypes, names, memory regions, axes, shapes, flags, enum values, nl.arange's bounds
and nl.sum() with no operand."""

import inspect

import numpy as np
import pytest

import trnsim.nki.legacy as nki
from trnsim.errors import TrnsimError
from trnsim.nki.legacy import operands

nl, nisa = nki.language, nki.isa
JUNK = (None, "x", 1e39, float("nan"), np.ones(3, np.float32), (1, 2), object(), -1, 0, True, [None])
TILE_NAMES = {"x", "y", "src", "data", "data0", "data1", "data2", "stationary", "moving", "on_true_tile",
              "predicate", "on_true", "value", "dst", "a", "indices", "vals", "segment_ids"}
HELPERS = {"assign", "update"}
"""What trnsim's own tiles call for `t[...] = v` and `t += v`; not old-API calls (nor are the
functions the modules import from `operands.HELPERS`)."""


def _calls():
    for prefix, module in (("nl", nl), ("nisa", nisa)):
        for name in sorted(dir(module)):
            function = getattr(module, name)
            if (name.startswith("_") or name in HELPERS or inspect.isclass(function)
                    or inspect.ismodule(function) or not callable(function)
                    or getattr(function, "__module__", "") in operands.HELPERS):
                continue
            try:
                signature = inspect.signature(function)
            except (TypeError, ValueError):
                continue
            yield f"{prefix}.{name}", function, [p for p in signature.parameters.values()
                                                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _plausible(parameter: inspect.Parameter, tile):
    if parameter.name in TILE_NAMES:
        return tile
    return {"op": np.add, "op0": np.add, "op1": np.add, "shape": (8, 8), "dtype": nl.float32,
            "axis": 1}.get(parameter.name, 1.0)


def _spoiled_call(function, parameters, spoiled, junk):
    @nki.jit
    def kernel(a):
        tile = nl.load(a)
        function(**{p.name: junk if p is spoiled else _plausible(p, tile) for p in parameters
                    if p is spoiled or p.default is inspect.Parameter.empty})
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, tile)
        return out
    return kernel


@pytest.mark.parametrize("name,function,parameters", list(_calls()),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_a_wrong_argument_raises_a_trnsim_error_or_runs(name, function, parameters):
    escaped = []
    for spoiled in parameters:
        for junk in JUNK:
            try:
                _spoiled_call(function, parameters, spoiled, junk)(np.ones((8, 8), np.float32))
            except TrnsimError:
                pass
            except Exception as error:  # noqa: BLE001 - what the test looks for
                escaped.append(f"{spoiled.name}={junk!r:.20}: {type(error).__name__}: {error}"[:200])
    assert not escaped, f"{name}:\n" + "\n".join(escaped)
