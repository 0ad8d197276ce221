"""Aten ops the neuron device does not implement run on CPU, once-per-op warned and counted.

With `trnsim.config.override(strict=True)` (or TRNSIM_STRICT=1) they raise UnsupportedError instead,
which is how the coverage tests find every op a model reaches.
"""

from __future__ import annotations

import collections
import warnings

from trnsim import config
from trnsim.core.runtime import current as current_runtime
from trnsim.errors import UnsupportedError


class FallbackWarning(UserWarning):
    """An aten op ran on CPU because the neuron device does not implement it."""


def _counts() -> collections.Counter:
    """Fallbacks per op, kept on the runtime (its reset zeroes them)."""
    return current_runtime().counter("torch.fallback")


def counts() -> dict[str, int]:
    """How many times each unimplemented aten op has fallen back to CPU in this process."""
    return dict(_counts())


def reset() -> None:
    """Forget the counts (and warn again on the next fallback of each op)."""
    _counts().clear()


def note(name: str, stacklevel: int = 3) -> None:
    """One fallback of the aten op `name`: counted, warned once, or refused in strict mode."""
    if config.current().strict:
        raise UnsupportedError(f"aten op {name} is not implemented on the neuron device",
                               what=name, hint="leave strict mode to run it on CPU")
    fallen = _counts()
    if name not in fallen:
        warnings.warn(f"trnsim.torch: {name} is not implemented on neuron; it runs on CPU",
                      FallbackWarning, stacklevel=stacklevel)
    fallen[name] += 1

