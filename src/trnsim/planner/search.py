"""Every training plan for a model on `nodes` instances, checked for memory fit and ranked.

The layouts (tp x pp x dp, expert parallel, interleaving, microbatch, ZeRO, recomputation) are
enumerated as numpy arrays; the memory of all of them is computed at once and those that fit
are timed. Times are memoised by shape (the same layer costs the same in every plan that runs
it), so a search costs one trnsim.cost call per distinct op shape plus microseconds per plan.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from trnsim.errors import ConfigError
from trnsim.planner import memory, training
from trnsim.planner.machines import PRECISIONS, Machine, check_counts, machine
from trnsim.planner.models import Model, model

RANKINGS = {"time": lambda r: r.step_s, "cost": lambda r: (r.usd_per_step or 0.0, r.step_s),
            "memory": lambda r: sum(r.memory.values())}
MICROBATCHES = (1, 2, 4, 8)
SHARDING = tuple(itertools.product(range(len(memory.ZERO)), range(len(memory.RECOMPUTE))))
"""(ZeRO, recompute) index pairs every layout is tried with."""


@dataclass
class SearchResult:
    """Plans that fit, best first; how many layouts were enumerated and how fast."""

    model: str
    instance: str
    nodes: int
    plans: list[training.TrainResult]
    enumerated: int
    infeasible: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def plans_per_s(self) -> float:
        return self.enumerated / self.seconds if self.seconds else float("inf")


def _divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


def layouts(mdl: Model, mach: Machine, nodes: int, global_batch: int, seq: int, precision: str) -> np.ndarray:
    """Every layout as rows of (tp, pp, dp, ep, microbatch, interleave, zero, recompute) indices."""
    ranks = nodes * mach.ranks
    rows = []
    for tp in _divisors(mach.ranks):
        if mdl.heads % tp or (mdl.kv_heads % tp and tp % mdl.kv_heads):
            continue
        for pp in _divisors(ranks // tp):
            if mdl.layers % pp:
                continue
            dp = ranks // (tp * pp)
            eps = [e for e in _divisors(dp) if mdl.moe and mdl.experts % e == 0] or [1]
            interleaves = [v for v in (1, 2, 4) if pp > 1 and mdl.layers % (pp * v) == 0] or [1]
            for ep, mb, v in itertools.product(eps, MICROBATCHES, interleaves):
                if global_batch % (dp * mb):
                    continue
                rows += [(tp, pp, dp, ep, mb, v, zero, recompute) for zero, recompute in SHARDING]
    return np.array(rows, dtype=np.int64).reshape(-1, 8)


def fits(mdl: Model, mach: Machine, table: np.ndarray, seq: int, precision: str) -> np.ndarray:
    """Memory per rank of every layout at once, as a boolean mask of those that fit."""
    tp, pp, dp, ep, mb, v, zero, recompute = table.T
    parts = memory.breakdown(mdl, tp=tp, pp=pp, dp=dp, ep=ep, microbatch=mb, seq=seq, precision=precision,
                             zero=zero, recompute=recompute, interleave=v, capacity=mach.hbm_per_rank)
    return sum(parts.values()) <= mach.hbm_per_rank


def search(model_name, instance: str, nodes: int, *, global_batch: int = 1024, seq: int = 0,
           precision: str = "bf16+fp32opt", rank_by: str = "time", top: int | None = None,
           price: float | None = None, progress: Callable[[int, int], None] | None = None) -> SearchResult:
    """All layouts that fit, timed and ranked by `rank_by` (time, cost or memory)."""
    if rank_by not in RANKINGS:
        raise ConfigError(f"cannot rank by {rank_by!r}", hint=f"one of {', '.join(RANKINGS)}")
    check_counts(nodes=nodes, global_batch=global_batch)
    check_counts(0, seq=seq, **({} if top is None else {"top": top}))
    mdl, mach = model(model_name), machine(instance)
    seq = seq or mdl.seq
    mdl.check_length(seq, "seq")
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}", hint=f"one of {', '.join(PRECISIONS)}")
    if not mach.supports(precision):
        raise ConfigError(f"precision {precision} is not available on {mach.name}")
    started = time.perf_counter()
    table = layouts(mdl, mach, nodes, global_batch, seq, precision)
    feasible = table[fits(mdl, mach, table, seq, precision)] if len(table) else table
    results = []
    for index, row in enumerate(feasible):
        tp, pp, dp, ep, mb, v, zero, recompute = (int(x) for x in row)
        plan = training.TrainPlan(tp=tp, pp=pp, dp=dp, ep=ep, microbatch=mb, global_batch=global_batch,
                                  seq=seq, zero=memory.ZERO[zero], recompute=memory.RECOMPUTE[recompute],
                                  precision=precision, interleave=v)
        results.append(training.evaluate(mdl, mach, nodes, plan, price))
        if progress:
            progress(index + 1, len(feasible))
    results.sort(key=RANKINGS[rank_by])
    notes = [] if results else [_nothing_fits(mdl, mach, nodes, len(table))]
    return SearchResult(mdl.name, mach.name, nodes, results[:top] if top else results, len(table),
                        len(table) - len(feasible), time.perf_counter() - started, notes)


def _nothing_fits(mdl: Model, mach: Machine, nodes: int, enumerated: int) -> str:
    """What to try instead when no layout fits: the node count whose memory would hold the model."""
    if not enumerated:
        return (f"no layout divides {mdl.name} ({mdl.heads} heads, {mdl.layers} layers) over "
                f"{nodes} x {mach.name}: try another global batch or node count")
    per_param = sum(memory.RECIPES["bf16+fp32opt"][:3])
    needed = mdl.params() * per_param / (mach.spec.hbm_bytes * (1 - memory.RESERVED_FRACTION))
    return (f"{mdl.name} does not fit on {nodes} x {mach.name} in any layout; its weights, gradients and "
            f"optimizer states alone need about {max(needed, 1):.1f} such instances")
