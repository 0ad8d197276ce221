"""A serving plan: one model replica over `tp` ranks, compiled for `compiled_batch` sequences,
serving `concurrency` requests of `seq_in` prompt and `seq_out` generated tokens.

TTFT is one request's prefill (the prompt through every layer, then the output layer for its last
token). TPOT (= ITL) is one decode step of the compiled batch: the device runs the compiled shape
whatever the concurrency. The KV cache holds the compiled batch at full context. Weight-only
int8 halves weight memory but not time: the published int8 rows run "Matmult-BF16" (weights are
widened to bf16 for the matmul), and they are no faster than bf16 ones. Throughput assumes
prefills interleave with decode steps: c requests take c x TTFT + seq_out x TPOT.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from trnsim.errors import ConfigError
from trnsim.planner import calibration
from trnsim.planner.machines import Machine, check_counts, machine
from trnsim.planner.memory import RESERVED_FRACTION
from trnsim.planner.models import Model, model
from trnsim.planner.ops import head_ops, layer_ops
from trnsim.planner.optime import collective_seconds, ops_seconds

WEIGHTS = {"bf16": 2, "int8": 1, "fp8": 1}
"""Bytes per weight by serving weight format."""


@dataclass(frozen=True)
class ServePlan:
    tp: int = 1
    concurrency: int = 1
    compiled_batch: int = 1
    seq_in: int = 128
    seq_out: int = 128
    weights: str = "bf16"

    def label(self) -> str:
        return f"tp{self.tp} batch{self.compiled_batch} c{self.concurrency} {self.weights}"


@dataclass
class ServeResult:
    model: str
    instance: str
    plan: ServePlan
    memory: dict[str, float]
    capacity: float
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    replicas: int
    usd_per_hour: float | None
    price_source: str

    @property
    def fits(self) -> bool:
        return sum(self.memory.values()) <= self.capacity

    @property
    def tokens_per_s_per_instance(self) -> float:
        return self.tokens_per_s * self.replicas

    def usd_per_million_tokens(self) -> float | None:
        if self.usd_per_hour is None:
            return None
        return self.usd_per_hour / 3600 / self.tokens_per_s_per_instance * 1e6

    def as_dict(self) -> dict:
        found = asdict(self)
        found.update(fits=self.fits, tokens_per_s_per_instance=self.tokens_per_s_per_instance,
                     usd_per_million_tokens=self.usd_per_million_tokens())
        return found


def check_model(mdl: Model, context: int) -> None:
    """ConfigError for a model no serving plan can run: an encoder, or a context past its positions."""
    if not mdl.causal:
        raise ConfigError(f"{mdl.name} is an encoder: a serving plan times token-by-token decoding, "
                          f"which it does not do", hint="serve a decoder (causal) model; time an "
                          "encoder's forward pass with trnsim.cost or a training plan")
    mdl.check_length(context, "seq_in + seq_out")


def check(mdl: Model, mach: Machine, plan: ServePlan) -> None:
    """ConfigError for a plan the instance cannot run. tp need not divide the attention heads:
    Neuron's inference pads them (Llama-3-8B, 32 heads, is published at tp 24 on inf2: rows I1, X34
    of data/calibration.csv)."""
    check_counts(tp=plan.tp, concurrency=plan.concurrency, compiled_batch=plan.compiled_batch,
                 seq_in=plan.seq_in, seq_out=plan.seq_out)
    check_model(mdl, plan.seq_in + plan.seq_out)
    if plan.tp < 1 or plan.tp > mach.ranks or mach.ranks % plan.tp:
        raise ConfigError(f"tp {plan.tp} does not divide the {mach.ranks} ranks of {mach.name}",
                          hint=f"tp in {[d for d in range(1, mach.ranks + 1) if mach.ranks % d == 0]}")
    if plan.concurrency < 1 or plan.compiled_batch < plan.concurrency:
        raise ConfigError(f"concurrency {plan.concurrency} must be 1..compiled batch {plan.compiled_batch}")
    if plan.weights not in WEIGHTS:
        raise ConfigError(f"weights {plan.weights!r} unknown", hint=f"one of {', '.join(WEIGHTS)}")
    if plan.weights == "fp8" and not mach.supports("fp8"):
        raise ConfigError(f"{mach.name} has no fp8", hint="weights bf16 or int8")


def serve(model_name, instance: str, plan: ServePlan | None = None,
          price: float | None = None) -> ServeResult:
    """Predict one serving plan; `plan` defaults to one replica over the whole instance."""
    mdl, mach = model(model_name), machine(instance)
    plan = plan or ServePlan(tp=mach.ranks)
    if not isinstance(plan, ServePlan):
        raise ConfigError(f"plan must be a ServePlan, got {type(plan).__name__}", hint="ServePlan(tp=4, ...)")
    check(mdl, mach, plan)
    return evaluate(mdl, mach, plan, price)


def memory_of(mdl: Model, mach: Machine, plan: ServePlan) -> dict[str, float]:
    kv_per_rank_heads = math.ceil(mdl.kv_heads / plan.tp) / mdl.kv_heads  # a rank holds whole heads
    context = plan.seq_in + plan.seq_out
    attention = mdl.layers * mdl.attention_params()  # split by heads; the rest splits evenly
    per_rank = (mdl.params() - attention) / plan.tp + mdl.layers * mdl.attention_params(plan.tp)
    return {"weights": per_rank * WEIGHTS[plan.weights],
            "kv cache": plan.compiled_batch * context * mdl.kv_bytes_per_token() * kv_per_rank_heads,
            "buffers": RESERVED_FRACTION * mach.hbm_per_rank}


def _pass_seconds(mdl: Model, mach: Machine, plan: ServePlan, batch: int, q_len: int, kv_len: int,
                  factor: float, collective_factor: float) -> float:
    """One forward pass through every layer: ops, the two all-reduces per layer, and the head for
    the last token of each sequence, the ops times the fitted `factor` of the phase and the
    all-reduces times its `collective_factor` (the runtime overlaps and fuses what the sum of
    separately costed ops does not know)."""
    precision = "fp8" if plan.weights == "fp8" else "bf16"
    share = mdl.moe_layers / mdl.layers
    layers = 0.0
    for moe, weight in ((False, 1 - share), (True, share)):
        if weight:
            ops = layer_ops(mdl, batch, q_len, kv_len, plan.tp, 1, moe, False)
            layers += weight * ops_seconds(mach, ops, precision)
    reduce = collective_seconds(mach, "all_reduce", batch * q_len * mdl.hidden * 2, plan.tp, 1)
    head = ops_seconds(mach, head_ops(mdl, batch, batch, plan.tp), precision)
    return (mdl.layers * layers + head) * factor + mdl.layers * 2 * reduce * collective_factor


def evaluate(mdl: Model, mach: Machine, plan: ServePlan, price: float | None = None) -> ServeResult:
    prefill = calibration.factor(calibration.PREFILL_TIME_FACTOR, mach)
    ttft = _pass_seconds(mdl, mach, plan, 1, plan.seq_in, plan.seq_in, prefill, prefill)
    context = plan.seq_in + plan.seq_out // 2
    decode = calibration.factor(calibration.DECODE_TIME_FACTOR, mach)
    decode_collectives = calibration.factor(calibration.DECODE_COLLECTIVE_FACTOR, mach)
    tpot = _pass_seconds(mdl, mach, plan, plan.compiled_batch, 1, context, decode, decode_collectives)
    round_s = plan.concurrency * ttft + plan.seq_out * tpot
    cost = mach.price(price)
    return ServeResult(mdl.name, mach.name, plan, memory_of(mdl, mach, plan), mach.hbm_per_rank, ttft, tpot,
                       plan.concurrency * plan.seq_out / round_s, mach.ranks // plan.tp,
                       cost.usd_per_hour, cost.source)
