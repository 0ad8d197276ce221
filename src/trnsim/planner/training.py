"""A training plan (parallel layout, batch, recipe) and what it costs: memory per rank against
capacity, step time from trnsim.cost per layer plus trnsim.system collectives per group, throughput,
MFU and HFU, dollars.

Rank order is Megatron's: tensor parallel innermost (inside a node), then data parallel (expert
parallel inside it), then pipeline stages outermost.

Overlap, as documented in docs/planner.md: tensor-parallel and expert all-to-all collectives sit on
the critical path; pipeline sends are exposed; the data-parallel gradient reduction overlaps the
last microbatch's backward pass (FSDP gathers overlap each layer's compute); the ZeRO-1 parameter
all-gather and the optimizer step are exposed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trnsim.errors import ConfigError
from trnsim.planner import calibration, memory
from trnsim.planner.machines import PRECISIONS, Machine, check_counts, machine
from trnsim.planner.models import Model, model
from trnsim.planner.ops import Op, backward, flops, head_ops, layer_ops
from trnsim.planner.optime import collective_seconds, ops_seconds


@dataclass(frozen=True)
class TrainPlan:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    microbatch: int = 1
    global_batch: int = 1024
    seq: int = 0
    zero: str = "zero1"
    recompute: str = "selective"
    precision: str = "bf16+fp32opt"
    interleave: int = 1

    def label(self) -> str:
        extra = f" v{self.interleave}" if self.interleave > 1 else ""
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        return (f"tp{self.tp} pp{self.pp} dp{self.dp}{ep} mb{self.microbatch}{extra} "
                f"{self.zero} rc:{self.recompute} {self.precision}")


@dataclass
class TrainResult:
    """A plan's predicted memory, step time and economics (`fits` False: memory is over capacity)."""

    model: str
    instance: str
    nodes: int
    plan: TrainPlan
    memory: dict[str, float]
    capacity: float
    step: dict[str, float] = field(default_factory=dict)
    step_s: float = 0.0
    sequences_per_s: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    hfu: float = 0.0
    usd_per_hour: float | None = None
    price_source: str = ""

    @property
    def fits(self) -> bool:
        return sum(self.memory.values()) <= self.capacity

    @property
    def usd_per_step(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour * self.step_s / 3600

    def usd_per_million_tokens(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour / 3600 / self.tokens_per_s * 1e6

    def as_dict(self) -> dict:
        found = asdict(self)
        found.update(fits=self.fits, usd_per_step=self.usd_per_step)
        return found


def check(mdl: Model, mach: Machine, nodes: int, plan: TrainPlan) -> None:
    """ConfigError, saying what would divide, for a plan the model or machine cannot run."""
    check_counts(nodes=nodes, tp=plan.tp, pp=plan.pp, dp=plan.dp, ep=plan.ep, microbatch=plan.microbatch,
                 global_batch=plan.global_batch, interleave=plan.interleave)
    check_counts(0, seq=plan.seq)  # 0: the model's length
    mdl.check_length(plan.seq or mdl.seq, "seq")
    if plan.interleave > 1 and plan.pp == 1:
        raise ConfigError(f"interleave {plan.interleave} needs pipeline stages to interleave (pp > 1)")
    if mdl.heads % plan.tp or (mdl.kv_heads % plan.tp and plan.tp % mdl.kv_heads):
        raise ConfigError(f"tp {plan.tp} does not divide {mdl.name}'s {mdl.heads} heads "
                          f"({mdl.kv_heads} KV heads)", hint=f"tp in {_divisors(mdl.heads)}")
    ranks = nodes * mach.ranks
    if plan.tp * plan.pp * plan.dp != ranks:
        raise ConfigError(f"tp {plan.tp} x pp {plan.pp} x dp {plan.dp} = "
                          f"{plan.tp * plan.pp * plan.dp} ranks, but {nodes} x {mach.name} has {ranks}",
                          hint=f"choose tp x pp x dp = {ranks} ({mach.ranks} ranks per node)")
    if mdl.layers % (plan.pp * plan.interleave):
        raise ConfigError(f"pp {plan.pp} x interleave {plan.interleave} does not divide {mdl.layers} layers",
                          hint=f"pp in {_divisors(mdl.layers)}")
    if plan.global_batch % (plan.dp * plan.microbatch):
        raise ConfigError(f"global batch {plan.global_batch} is not a multiple of dp {plan.dp} x "
                          f"microbatch {plan.microbatch}")
    if plan.ep > 1 and (not mdl.moe or mdl.experts % plan.ep or plan.dp % plan.ep):
        raise ConfigError(f"ep {plan.ep} needs an MoE whose experts and dp ({plan.dp}) it divides")
    if plan.zero not in memory.ZERO or plan.recompute not in memory.RECOMPUTE:
        raise ConfigError(f"zero {plan.zero!r} / recompute {plan.recompute!r} unknown",
                          hint=f"zero in {memory.ZERO}, recompute in {memory.RECOMPUTE}")
    if plan.precision not in PRECISIONS or not mach.supports(plan.precision):
        raise ConfigError(f"precision {plan.precision!r} is not available on {mach.name}",
                          hint=f"one of {', '.join(p for p in PRECISIONS if mach.supports(p))}")


def _divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0][:12]


def train(model_name, instance: str, nodes: int = 1, plan: TrainPlan | None = None,
          price: float | None = None) -> TrainResult:
    """Predict one training plan; `plan` defaults to tp = one node, dp over nodes."""
    mdl, mach = model(model_name), machine(instance)
    tp = min(mach.ranks, mdl.heads)
    plan = plan or TrainPlan(tp=tp, dp=nodes * mach.ranks // tp)
    plan = plan if plan.seq else TrainPlan(**{**asdict(plan), "seq": mdl.seq})
    check(mdl, mach, nodes, plan)
    return evaluate(mdl, mach, nodes, plan, price)


def memory_of(mdl: Model, mach: Machine, plan: TrainPlan) -> dict[str, float]:
    found = memory.breakdown(mdl, tp=plan.tp, pp=plan.pp, dp=plan.dp, ep=plan.ep, microbatch=plan.microbatch,
                             seq=plan.seq, precision=plan.precision, zero=memory.ZERO.index(plan.zero),
                             recompute=memory.RECOMPUTE.index(plan.recompute), interleave=plan.interleave,
                             capacity=mach.hbm_per_rank)
    return {kind: float(value) for kind, value in found.items()}


def evaluate(mdl: Model, mach: Machine, nodes: int, plan: TrainPlan, price: float | None = None,
             with_time: bool = True) -> TrainResult:
    """The prediction for a checked plan (`with_time` False: memory only, for a quick fit test)."""
    cost = mach.price(price)
    result = TrainResult(mdl.name, mach.name, nodes, plan, memory_of(mdl, mach, plan), mach.hbm_per_rank,
                         usd_per_hour=None if cost.usd_per_hour is None else cost.usd_per_hour * nodes,
                         price_source=cost.source)
    if with_time:
        _time(result, mdl, mach, plan)
    return result


COSTED_TOKENS = 4096
"""Ops are costed on the sequences of a microbatch that fit in this many tokens (at least one)
and scaled to the whole microbatch: the same shapes serve many plans, and short sequences
still run at the size the device sees."""


def costed_sequences(plan: TrainPlan) -> int:
    """The largest divisor of the microbatch whose tokens fit in COSTED_TOKENS (at least 1)."""
    fit = max(1, COSTED_TOKENS // plan.seq)
    return max(d for d in range(1, plan.microbatch + 1) if plan.microbatch % d == 0 and d <= fit)


def _layer_times(mdl: Model, mach: Machine, plan: TrainPlan) -> dict[str, float]:
    """Seconds of one microbatch through one average layer: forward, backward, recompute, comms."""
    share = mdl.moe_layers / mdl.layers
    sequences = costed_sequences(plan)
    scale = plan.microbatch // sequences
    parts = {"forward": 0.0, "backward": 0.0, "recompute": 0.0, "flops": 0.0}
    for moe, weight in ((False, 1 - share), (True, share)):
        if weight == 0:
            continue
        ops = layer_ops(mdl, sequences, plan.seq, plan.seq, plan.tp, plan.ep, moe, seq_parallel=True)
        forward = ops_seconds(mach, ops, plan.precision) * scale
        parts["forward"] += weight * forward
        parts["backward"] += weight * ops_seconds(mach, backward(ops), plan.precision) * scale
        parts["recompute"] += weight * _recompute(ops, forward, mach, plan) * scale
        parts["flops"] += weight * sum(flops(op) for op in ops) * scale
    return parts


def _recompute(ops: list[Op], forward: float, mach: Machine, plan: TrainPlan) -> float:
    """Recomputed forward time of the costed sequences (`forward` is already scaled)."""
    if plan.recompute == "full":
        return forward / (plan.microbatch // costed_sequences(plan))
    if plan.recompute == "selective":  # the FFN activation is recomputed, not kept
        return ops_seconds(mach, [op for op in ops if op.role == "activation"], plan.precision)
    return 0.0


def _tp_comm(mdl: Model, mach: Machine, plan: TrainPlan) -> float:
    """Per layer and microbatch, forward and backward: sequence-parallel all-gathers and
    reduce-scatters around attention and FFN, and for MoE layers the expert all-to-alls."""
    size = plan.microbatch * plan.seq * mdl.hidden * 2
    seconds = 4 * (collective_seconds(mach, "all_gather", size, plan.tp, 1)
                   + collective_seconds(mach, "reduce_scatter", size, plan.tp, 1))
    if mdl.moe and plan.ep > 1:
        routed = size * mdl.top_k
        share = mdl.moe_layers / mdl.layers
        seconds += 4 * share * collective_seconds(mach, "all_to_all", routed, plan.ep, plan.tp)
    return seconds


def _time(result: TrainResult, mdl: Model, mach: Machine, plan: TrainPlan) -> None:
    factor = calibration.factor(calibration.TRAIN_TIME_FACTOR, mach)
    layer = _layer_times(mdl, mach, plan)
    stage_layers = mdl.layers / plan.pp
    sequences = costed_sequences(plan)
    head = head_ops(mdl, sequences * plan.seq, sequences, plan.tp)
    head_s = (ops_seconds(mach, head, plan.precision)
              + ops_seconds(mach, backward(head), plan.precision)) / sequences
    per_microbatch_compute = (stage_layers * (layer["forward"] + layer["backward"] + layer["recompute"])
                              + head_s * plan.microbatch) * factor
    per_microbatch_comm = stage_layers * _tp_comm(mdl, mach, plan)
    microbatches = plan.global_batch // (plan.dp * plan.microbatch)
    slots = microbatches + (plan.pp - 1) / plan.interleave
    p2p = 0.0
    if plan.pp > 1:
        activation = plan.microbatch * plan.seq * mdl.hidden * 2 // plan.tp
        send = collective_seconds(mach, "permute", activation, plan.pp, plan.tp * plan.dp)
        p2p = 2 * send * plan.interleave * (microbatches + plan.pp - 1)
    last_backward = stage_layers * layer["backward"] * factor
    dp_s = _dp_exposed(mdl, mach, plan, last_backward)
    optimizer_s = _optimizer(mdl, mach, plan)
    result.step = {
        "compute": microbatches * per_microbatch_compute,
        "tp/ep collectives": microbatches * per_microbatch_comm,
        "pipeline bubble": (slots - microbatches) * (per_microbatch_compute + per_microbatch_comm),
        "pipeline sends": p2p,
        "dp collectives (exposed)": dp_s,
        "optimizer": optimizer_s,
    }
    result.step_s = sum(result.step.values())
    result.sequences_per_s = plan.global_batch / result.step_s
    result.tokens_per_s = result.sequences_per_s * plan.seq
    flops_per_sequence = 3 * plan.tp * (mdl.layers * layer["flops"] / plan.microbatch
                                        + sum(flops(op) for op in head) / sequences)
    peak = mach.peak_per_rank(plan.precision) * mach.ranks * result.nodes
    result.mfu = flops_per_sequence * result.sequences_per_s / peak
    recompute_share = {"full": 1 / 3, "selective": 0.0, "none": 0.0}[plan.recompute]
    result.hfu = result.mfu * (1 + recompute_share)


def _dp_exposed(mdl: Model, mach: Machine, plan: TrainPlan, overlap_s: float) -> float:
    """Exposed seconds of the data-parallel gradient (and parameter) collectives."""
    if plan.dp == 1:
        return 0.0
    weight_b, _, _, wire_b = memory.RECIPES[plan.precision]
    params = memory.params_per_rank(mdl, plan.tp, plan.pp, plan.ep)
    grads = int(params * wire_b)
    stride = plan.tp
    if plan.zero == "none":
        return max(0.0, collective_seconds(mach, "all_reduce", grads, plan.dp, stride) - overlap_s)
    reduce = collective_seconds(mach, "reduce_scatter", grads, plan.dp, stride)
    gather = collective_seconds(mach, "all_gather", int(params * weight_b), plan.dp, stride)
    if plan.zero == "zero1":
        return max(0.0, reduce - overlap_s) + gather
    microbatches = plan.global_batch // (plan.dp * plan.microbatch)
    return max(0.0, microbatches * 2 * gather + reduce - overlap_s * microbatches * 2)


def _optimizer(mdl: Model, mach: Machine, plan: TrainPlan) -> float:
    params = memory.params_per_rank(mdl, plan.tp, plan.pp, plan.ep)
    if plan.zero != "none":
        params /= plan.dp
    return ops_seconds(mach, [Op("optimizer_step", (max(1, int(params)),))], plan.precision)
