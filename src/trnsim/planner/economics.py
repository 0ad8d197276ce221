"""Dollars: time and cost to train a number of tokens, the same job side by side on several
instance kinds, and when moving a workload pays off."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from trnsim.errors import ConfigError
from trnsim.planner.search import search

COMPARE_TRAIN = ("trn1.32xlarge", "trn2.48xlarge", "Trn3 Gen1 UltraServer", "p5.48xlarge", "p5en.48xlarge")
"""Default instances of `plan compare`: one per Trainium generation, and the H100 and H200 instances
with an on-demand price."""


@dataclass
class TrainingJob:
    """The best plan found on one instance kind for training `tokens`; where no plan fits, `note`
    says why and `days` and the dollars are None."""

    instance: str
    nodes: int
    plan: str
    tokens_per_s: float
    mfu: float
    days: float | None
    usd_per_hour: float | None
    usd: float | None
    price_source: str
    note: str = ""


def training_job(model_name, instance: str, nodes: int, tokens: float, *, global_batch: int = 1024,
                 seq: int = 0, price: float | None = None, progress=None) -> TrainingJob:
    """Time and dollars to train `tokens` with the fastest plan that fits on `nodes` instances."""
    if not (isinstance(tokens, numbers.Real) and math.isfinite(tokens) and tokens > 0):
        raise ConfigError(f"tokens to train must be a positive finite number, got {tokens!r}")
    found = search(model_name, instance, nodes, global_batch=global_batch, seq=seq, price=price,
                   top=1, progress=progress)
    if not found.plans:
        return TrainingJob(instance, nodes, "-", 0.0, 0.0, None, None, None, "", found.notes[0])
    best = found.plans[0]
    seconds = tokens / best.tokens_per_s
    usd = None if best.usd_per_hour is None else best.usd_per_hour * seconds / 3600
    return TrainingJob(instance, nodes, best.plan.label(), best.tokens_per_s, best.mfu, seconds / 86400,
                       best.usd_per_hour, usd, best.price_source)


def break_even_months(monthly_spend: float, savings_fraction: float, engineering_usd: float) -> float:
    """Months until a one-off migration cost is paid back by saving `savings_fraction` of the
    monthly spend (infinite when nothing is saved)."""
    numbers_given = (monthly_spend, savings_fraction, engineering_usd)
    if not all(isinstance(x, numbers.Real) and math.isfinite(x) for x in numbers_given):
        raise ConfigError(f"break_even_months{numbers_given}: every figure must be a finite number")
    if monthly_spend < 0 or engineering_usd < 0:
        raise ConfigError("monthly spend and engineering cost must not be negative")
    if savings_fraction > 1:
        raise ConfigError(f"a saving of {savings_fraction!r} of the spend is more than all of it")
    saved = monthly_spend * savings_fraction
    return engineering_usd / saved if saved > 0 else float("inf")


def savings(current_usd: float | None, new_usd: float | None) -> float | None:
    """Fraction of the current cost the new option saves for the same work."""
    if current_usd is None or new_usd is None or current_usd <= 0:
        return None
    if not (math.isfinite(current_usd) and math.isfinite(new_usd)) or new_usd < 0:
        raise ConfigError(f"savings({current_usd!r}, {new_usd!r}): costs are finite dollars >= 0")
    return 1 - new_usd / current_usd
