"""Every public call of both front ends (`nisa`/`nl` of NKI 0.6 and of the old `neuronxcc.nki` API),
with a wrong value in one argument at a time (the others plausible): the kernel runs or raises a
TrnsimError; no other exception ever escapes.

The sweep found numpy's ValueError / TypeError and attribute lookups escaping in 111 (call, argument,
exception) cases of the 0.6 API (`name=`, `dtype=`, `buffer=`, `keepdims=`, `engine=`,
`reduce_cmd=`, `transpose_x=`, nl.ndarray's `address=`, nl.while_loop given a non-function) and in
95 of the old API (tiles, dtypes, names, memory regions, axes, shapes, flags, enum values,
nl.arange's bounds, nl.sum() with no operand)."""

import inspect

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
import trnsim.nki.legacy as old
from trnsim.errors import TrnsimError
from trnsim.nki.legacy import operands

JUNK = (None, "x", 1e39, float("nan"), np.ones(3, np.float32), (1, 2), object(), -1, 0, True, [None])
"""Values that are wrong for most parameters (and right for a few, which then simply run)."""
OLD_HELPERS = {"assign", "update"}
"""What trnsim's own old-API tiles call for `t[...] = v` and `t += v`; not old-API calls (nor are
the functions the old modules import from `operands.HELPERS`)."""


def _calls(modules: dict):
    """(label, function, its keyword-passable parameters) for every public call of the modules."""
    for prefix, module in modules.items():
        for name in sorted(dir(module)):
            function = getattr(module, name)
            if (name.startswith("_") or name in OLD_HELPERS or inspect.isclass(function)
                    or inspect.ismodule(function) or not callable(function)
                    or getattr(function, "__module__", "") in operands.HELPERS):
                continue
            try:
                signature = inspect.signature(function)
            except (TypeError, ValueError):
                continue
            yield f"{prefix}.{name}", function, [p for p in signature.parameters.values()
                                                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _arguments(parameters, spoiled, junk, tile, tile_names: set, plausible: dict) -> dict:
    """`junk` as `spoiled`, and a value of the kind its name says for every other required one."""
    def value(parameter):
        if parameter is spoiled:
            return junk
        return tile() if parameter.name in tile_names else plausible.get(parameter.name, 1.0)
    return {p.name: value(p) for p in parameters if p is spoiled or p.default is inspect.Parameter.empty}


def _escapes(parameters, run) -> list[str]:
    """What each wrong value let through other than a TrnsimError (`run(spoiled, junk)` runs a kernel)."""
    escaped = []
    for spoiled in parameters:
        for junk in JUNK:
            try:
                run(spoiled, junk)
            except TrnsimError:
                pass
            except Exception as error:  # noqa: BLE001 - what the test looks for
                escaped.append(f"{spoiled.name}={junk!r:.20}: {type(error).__name__}: {error}"[:200])
    return escaped


# --- NKI 0.6 -----------------------------------------------------------------------------------
TILE_NAMES = {"dst", "data", "src", "data0", "data1", "data2", "x", "y", "stationary", "moving",
              "on_true_tile", "predicate", "on_true"}
PLAUSIBLE = {"op": nl.add, "op0": nl.add, "op1": nl.add, "reduce_op": nl.add, "shape": (8, 8),
             "dtype": nl.float32, "axis": 1}


def _run_0_6(function, parameters, spoiled, junk):
    def tile():
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        return t

    def kernel(a):
        function(**_arguments(parameters, spoiled, junk, tile, TILE_NAMES, PLAUSIBLE))
        return a
    nki.simulate(kernel)(np.ones((8, 8), np.float32))


@pytest.mark.parametrize("name,function,parameters", list(_calls({"nisa": nisa, "nl": nl})),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_a_wrong_argument_raises_a_trnsim_error_or_runs(name, function, parameters):
    escaped = _escapes(parameters, lambda spoiled, junk: _run_0_6(function, parameters, spoiled, junk))
    assert not escaped, f"{name}:\n" + "\n".join(escaped)


# --- the old API -------------------------------------------------------------------------------
OLD_TILE_NAMES = {"x", "y", "src", "data", "data0", "data1", "data2", "stationary", "moving",
                  "on_true_tile", "predicate", "on_true", "value", "dst", "a", "indices", "vals",
                  "segment_ids"}
OLD_PLAUSIBLE = {"op": np.add, "op0": np.add, "op1": np.add, "shape": (8, 8), "dtype": old.language.float32,
                 "axis": 1}


def _run_old(function, parameters, spoiled, junk):
    ol = old.language

    @old.jit
    def kernel(a):
        tile = ol.load(a)
        function(**_arguments(parameters, spoiled, junk, lambda: tile, OLD_TILE_NAMES, OLD_PLAUSIBLE))
        out = ol.ndarray((8, 8), dtype=ol.float32, buffer=ol.shared_hbm)
        ol.store(out, tile)
        return out
    kernel(np.ones((8, 8), np.float32))


@pytest.mark.parametrize("name,function,parameters",
                         list(_calls({"old nl": old.language, "old nisa": old.isa})),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_a_wrong_argument_to_an_old_api_call_raises_a_trnsim_error_or_runs(name, function, parameters):
    escaped = _escapes(parameters, lambda spoiled, junk: _run_old(function, parameters, spoiled, junk))
    assert not escaped, f"{name}:\n" + "\n".join(escaped)
