"""Bytes one rank holds during training: weights, gradients, optimizer states, activations and
buffers, for a parallel layout, a precision recipe, ZeRO/FSDP sharding and recomputation.

Activations follow Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (arXiv 2205.05198, §4): 34·s·b·h bytes per layer with FFN 4h, of which 10·s·b·h is the
attention block (flash attention keeps no score matrix) and 24·s·b·h the FFN, here scaled with the
FFN width a token uses; tensor parallel with sequence parallel divides it by tp. With 1F1B the
first stage holds `pp` microbatches in flight (interleaving adds (pp-1)/(pp·v) of one).
"""

from __future__ import annotations

import numpy as np

from trnsim.planner.models import Model

RECIPES = {
    # precision: (weight, gradient, optimizer-state bytes per parameter, gradient bytes on the wire)
    "bf16+fp32opt": (2, 4, 12, 4),  # bf16 weights; fp32 gradients, master weights, Adam m and v
    "bf16": (2, 4, 12, 4),  # another name for bf16+fp32opt (mixed precision keeps fp32 states)
    "bf16+sr": (2, 2, 4, 2),  # stochastic rounding: no master copy; bf16 gradients and Adam states
    "fp8": (2, 4, 12, 4),  # fp8 matmuls with bf16 weights and an fp32 optimizer
}
"""Bytes per parameter by precision recipe (mixed precision: Micikevicius et al., arXiv 1710.03740)."""
RESERVED_FRACTION = 0.05
"""Share of a rank's HBM kept for the runtime, compiled program and fragmentation (an assumption,
not a measurement)."""
ZERO = ("none", "zero1", "fsdp")
RECOMPUTE = ("none", "selective", "full")


def ffn_width_per_token(model: Model) -> float:
    """The FFN width one token passes through, averaged over dense and MoE layers."""
    if not model.moe:
        return model.ffn
    moe_width = (model.top_k + model.shared_experts) * model.expert_ffn
    dense_layers = model.layers - model.moe_layers
    return (dense_layers * model.ffn + model.moe_layers * moe_width) / model.layers


def activation_bytes_per_token_layer(model: Model, recompute: str, tp: int) -> float:
    """Activation bytes one token leaves per layer until its backward pass."""
    ffn = ffn_width_per_token(model) * (1.25 if model.gated else 1.0)
    if recompute == "full":
        kept = 2 * model.hidden
    elif recompute == "selective":
        kept = 10 * model.hidden + 2 * ffn
    else:
        kept = 10 * model.hidden + 6 * ffn
    return kept / tp


def layer_params_per_rank(model: Model, tp: int, ep: int) -> float:
    """Weights of one layer one rank holds (averaged over dense and MoE layers)."""
    attention = model.attention_params(tp) + 2 * model.hidden
    if not model.moe:
        return attention + model.dense_ffn_params() / tp
    experts = model.experts / ep * model.expert_params() / tp
    moe = experts + model.shared_experts * model.expert_params() / tp + model.hidden * model.experts
    share = model.moe_layers / model.layers
    return attention + share * moe + (1 - share) * model.dense_ffn_params() / tp


def params_per_rank(model: Model, tp, pp, ep):
    """Weights of the largest pipeline stage on one rank (the first or last carries an embedding).
    Scalars or numpy arrays of layouts."""
    tables = np.where(pp > 1, 1, 1 if model.tied else 2)
    return model.layers / pp * layer_params_per_rank(model, tp, ep) + model.vocab * model.hidden / tp * tables


def breakdown(model: Model, *, tp, pp, dp, ep, microbatch, seq: int, precision: str, zero, recompute,
              interleave, capacity: float) -> dict:
    """Bytes per rank by kind: weights, gradients, optimizer, activations, buffers. The layout
    arguments are scalars or numpy arrays (one entry per layout); `zero` and `recompute` are
    indices into ZERO and RECOMPUTE."""
    weight_b, grad_b, optim_b, _ = RECIPES[precision]
    params = params_per_rank(model, tp, pp, ep)
    fsdp, sharded = np.equal(zero, 2), np.greater_equal(zero, 1)
    in_flight = np.where(pp > 1, pp * (1 + np.where(interleave > 1, (pp - 1) / (pp * interleave), 0)), 1)
    kept = np.array([activation_bytes_per_token_layer(model, name, 1) for name in RECOMPUTE])[recompute]
    tokens = microbatch * seq
    gathered = 2 * layer_params_per_rank(model, tp, ep) * weight_b
    return {
        "weights": np.where(fsdp, params * weight_b / dp + gathered, params * weight_b),
        "gradients": np.where(fsdp, params * grad_b / dp, params * grad_b),
        "optimizer": np.where(sharded, params * optim_b / dp, params * optim_b),
        "activations": model.layers / pp * in_flight * tokens * kept / tp,
        # fp32 logits for the loss on the last stage, two activation-sized collective buffers, reserve
        "buffers": tokens * (model.vocab / tp * 4 + 4 * model.hidden) + RESERVED_FRACTION * capacity,
    }
