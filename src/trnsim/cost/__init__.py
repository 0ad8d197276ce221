"""The op-cost library: what one op costs on one physical NeuronCore of a target.

    >>> from trnsim import cost
    >>> c = cost.matmul(4096, 4096, 14336, dtype="bfloat16", target="trn2")
    >>> c.seconds, c.bound, c.lower_bound_seconds

Each family runs a built-in NKI kernel (cost/kernels.py). `tier="exact"` traces it at the full
shape and schedules it with the timing model; `tier="fast"` traces a clipped grid of the same
tiles and extrapolates (cost/blocked.py), agreeing with exact within 5% on tests/cost's grid
of shapes and on nearly all random ones; docs/timing.md lists the kinds it misses by more. Every
prediction is at least its roofline (`lower_bound_seconds`). No torch import.
"""

from trnsim.cost.opcost import OpCost
from trnsim.cost.ops import (
    FAMILIES,
    attention,
    copy,
    elementwise,
    embedding,
    matmul,
    norm,
    op,
    optimizer_step,
    reduction,
    softmax,
)

__all__ = ["FAMILIES", "OpCost", "attention", "copy", "elementwise", "embedding", "matmul", "norm", "op",
           "optimizer_step", "reduction", "softmax"]
