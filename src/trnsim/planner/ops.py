"""The ops one rank runs for one transformer layer, head and optimizer, as trnsim.cost op families
with per-rank shapes (tensor parallel `tp` splits heads and FFN; sequence parallel splits the
norms and residuals; expert parallel `ep` splits experts).

An op is (family, args, count): `count` copies of cost.<family>(*args). Backward passes are
written as the same families: a matmul's two gradients (input and weight) are two matmuls of the
same size, costed as two of the forward one; attention's backward is `ATTENTION_BACKWARD`
forwards, and a pointwise op's backward is two passes of it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from trnsim.planner.models import Model

ATTENTION_BACKWARD = 2.5
"""Fused attention backward / forward work: five matmuls per tile against two (FlashAttention-2,
arXiv 2307.08691 §3.1.2)."""


class Op(NamedTuple):
    family: str
    args: tuple
    count: float = 1.0
    role: str = ""  # "activation": the FFN's activation, which selective recomputation recomputes


def _split(size: int, parts: int) -> int:
    return max(1, math.ceil(size / parts))


def attention_ops(model: Model, batch: int, q_len: int, kv_len: int, tp: int, seq_parallel: bool) -> list[Op]:
    """Norm, QKV, attention, output projection and residual add of one layer."""
    tokens = batch * q_len
    pointwise_tokens = _split(tokens, tp) if seq_parallel else tokens
    heads = _split(model.heads, tp)
    kv_heads = _split(model.kv_heads, tp)
    q_out, kv_out = heads * model.head_dim, 2 * kv_heads * model.head_dim
    return [
        Op("norm", (pointwise_tokens, model.hidden)),
        Op("matmul", (tokens, model.hidden, q_out + kv_out)),
        Op("attention", (batch, heads, q_len, kv_len, model.head_dim, kv_heads, model.causal)),
        Op("matmul", (tokens, q_out, model.hidden)),
        Op("elementwise", (pointwise_tokens * model.hidden, 2)),
    ]


def ffn_ops(model: Model, tokens: int, width: int, tp: int, count: float = 1.0) -> list[Op]:
    """One FFN (dense, or one expert) of `width` over `tokens`: up (and gate), activation, down."""
    local = _split(width, tp)
    up = (2 if model.gated else 1) * local
    return [Op("matmul", (tokens, model.hidden, up), count),
            Op("elementwise", (tokens * local, 2 if model.gated else 1), count, "activation"),
            Op("matmul", (tokens, local, model.hidden), count)]


def moe_ops(model: Model, tokens: int, tp: int, ep: int) -> list[Op]:
    """Router, the routed experts this rank holds (balanced routing: each rank receives
    tokens x top_k assignments, spread over the experts it holds), and shared experts."""
    local_experts = _split(model.experts, ep)
    assignments = tokens * model.top_k
    touched = min(local_experts, assignments)
    rows = _split(assignments, touched)
    ops = [Op("matmul", (tokens, model.hidden, model.experts))]
    ops += ffn_ops(model, rows, model.expert_ffn, tp, touched)
    if model.shared_experts:
        ops += ffn_ops(model, tokens, model.expert_ffn * model.shared_experts, tp)
    return ops


def layer_ops(model: Model, batch: int, q_len: int, kv_len: int, tp: int, ep: int, moe: bool,
              seq_parallel: bool) -> list[Op]:
    """Forward ops of one layer (dense or MoE) for `batch` sequences of `q_len` new tokens."""
    tokens = batch * q_len
    pointwise_tokens = _split(tokens, tp) if seq_parallel else tokens
    ops = attention_ops(model, batch, q_len, kv_len, tp, seq_parallel)
    ops.append(Op("norm", (pointwise_tokens, model.hidden)))
    ops += moe_ops(model, tokens, tp, ep) if moe else ffn_ops(model, tokens, model.ffn, tp)
    ops.append(Op("elementwise", (pointwise_tokens * model.hidden, 2)))
    return ops


def head_ops(model: Model, tokens: int, batch: int, tp: int) -> list[Op]:
    """Embedding lookup, final norm, and the output layer with its softmax (a vision model
    classifies one token per image)."""
    rows = batch if model.kind == "vision" else tokens
    vocab = _split(model.vocab, tp)
    return [Op("embedding", (tokens, model.hidden)), Op("norm", (rows, model.hidden)),
            Op("matmul", (rows, model.hidden, vocab)), Op("softmax", (rows, vocab))]


def backward(ops: list[Op]) -> list[Op]:
    """The backward pass of forward `ops`: per matmul its input and weight gradients."""
    grads = []
    for op in ops:
        if op.family == "matmul":
            grads.append(Op("matmul", op.args, op.count * 2))
        elif op.family == "attention":
            grads.append(Op("attention", op.args, op.count * ATTENTION_BACKWARD))
        elif op.family != "embedding":
            grads.append(Op(op.family, op.args, op.count * 2))
    return grads


def flops(op: Op) -> float:
    """Model FLOPs of one op (2 per multiply-add), as trnsim.cost counts them."""
    if op.family == "matmul":
        m, k, n = op.args
        return 2.0 * m * k * n * op.count
    if op.family == "attention":
        batch, heads, q_len, kv_len, head_dim, _, causal = op.args
        kept = 1.0 - (q_len - 1) / (2.0 * kv_len) if causal and q_len > 1 else 1.0
        return 4.0 * batch * heads * q_len * kv_len * head_dim * kept * op.count
    return 0.0


def traffic(op: Op, element_bytes: float) -> float:
    """Compulsory HBM bytes of one op: inputs read once, output written once."""
    args = op.args
    if op.family == "matmul":
        m, k, n = args
        moved = m * k + k * n + m * n
    elif op.family == "attention":
        batch, heads, q_len, kv_len, head_dim, kv_heads, _ = args
        moved = batch * (2 * heads * q_len * head_dim + 2 * kv_heads * kv_len * head_dim)
    elif op.family == "elementwise":
        moved = (args[1] + 1) * args[0]
    elif op.family in ("norm", "softmax", "embedding"):
        moved = 2 * args[0] * args[1]
    else:
        moved = 7 * args[0]
    return moved * element_bytes * op.count
