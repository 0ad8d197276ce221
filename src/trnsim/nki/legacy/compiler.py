"""`neuronxcc.nki.compiler`: allocation helpers of SDK 2.26 (`ncc.sbuf.mod_alloc`, ...).

trnsim allocates SBUF and PSUM as the compiler would (core/memory.py), so the direct-allocation
helpers are accepted and leave placement to it: values do not depend on addresses. They are
accepted so kernels written with them run unmodified; docs/legacy-nki.md says so.
"""

from __future__ import annotations

import contextlib
import types


def _space(region):
    return types.SimpleNamespace(alloc=lambda *a, **k: region, mod_alloc=lambda *a, **k: region,
                                 auto_alloc=lambda *a, **k: region)


def _regions():
    from trnsim.nki import dtypes
    return _space(dtypes.SBUF), _space(dtypes.PSUM)


sbuf, psum = _regions()


def skip_middle_end_transformations(function):
    return function


def enable_stack_allocator(function=None):
    return function if function is not None else (lambda f: f)


def force_auto_alloc(function=None):
    return function if function is not None else (lambda f: f)


@contextlib.contextmanager
def tensor_engine_priority():
    yield


no_reorder = tensor_engine_priority
"""`with ncc.no_reorder():` fixes the order instructions are issued in; trnsim issues them in
program order anyway."""
