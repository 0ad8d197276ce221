"""Seconds of ops and collectives on one rank of a Machine.

Neuron: every op from trnsim.cost (fast tier) and every collective from
trnsim.system.collective_time, memoised by shape (op costs also on disk: planner/opcache.py).
A logical core of `lnc` physical cores splits an op's work between them (seconds / lnc).
GPUs: a roofline with achieved-fraction constants and an NCCL ring model (planner/gpu.py).
"""

from __future__ import annotations

from functools import cache

from trnsim import system
from trnsim.errors import ShapeError
from trnsim.planner import gpu, opcache
from trnsim.planner.machines import Machine
from trnsim.planner.ops import Op, flops, traffic

MATMUL_DTYPES = {"fp8": "float8_e4m3"}
"""Precision recipe -> dtype its matmuls run in (bfloat16 unless listed)."""
ELEMENT_BYTES = {"bfloat16": 2, "float8_e4m3": 1, "float32": 4}


def dtype_of(precision: str, family: str) -> str:
    """Matmuls in the recipe's dtype, the optimizer in fp32, everything else in bf16."""
    if family == "optimizer_step":
        return "float32"
    return MATMUL_DTYPES.get(precision, "bfloat16") if family == "matmul" else "bfloat16"


OPTIMIZER_CHUNK = 1 << 24
"""AdamW over more parameters is costed as whole chunks of this many (a streaming op: linear)."""


def _remembered(compute):
    """Memoise a cost function in this process and on disk (planner/opcache.py)."""
    @cache
    def wrapper(*key):
        text = repr((compute.__name__, *key))
        found = opcache.lookup(text)
        if found is None:
            found = compute(*key)
            opcache.remember(text, found)
        return found
    return wrapper


@_remembered
def _neuron_op(target: str, family: str, args: tuple, dtype: str) -> float:
    from trnsim import cost  # the op-cost library (imported late: it traces kernels on first use)

    if family == "optimizer_step" and args[0] > OPTIMIZER_CHUNK:
        return _neuron_op(target, family, (OPTIMIZER_CHUNK,), dtype) * args[0] / OPTIMIZER_CHUNK
    return getattr(cost, family)(*args, dtype=dtype, target=target, tier="fast").seconds


def op_seconds(machine: Machine, op: Op, precision: str) -> float:
    """Seconds of `op.count` copies of one op on one rank."""
    dtype = dtype_of(precision, op.family)
    if machine.gpu:
        return gpu.op_seconds(machine, flops(op), traffic(op, ELEMENT_BYTES[dtype]), dtype)
    args = tuple(op.args)
    if op.family == "attention":  # cost.attention's keywords: kv_heads, causal
        return op.count * _neuron_attention(machine.target, args, dtype) / machine.lnc
    return op.count * _neuron_op(machine.target, op.family, args, dtype) / machine.lnc


@_remembered
def _neuron_attention(target: str, args: tuple, dtype: str) -> float:
    from trnsim import cost

    batch, heads, q_len, kv_len, head_dim, kv_heads, causal = args
    try:
        return cost.attention(batch, heads, q_len, kv_len, head_dim, kv_heads=kv_heads, causal=causal,
                              dtype=dtype, target=target, tier="fast").seconds
    except ShapeError:
        if not (causal and q_len == kv_len and q_len % 2 == 0):
            raise
    # A causal square the fast tier cannot grid (seen at 8192): its two causal halves on the
    # diagonal plus the full block below them, the same (query, key) pairs.
    half = q_len // 2
    diagonal = _neuron_attention(target, (batch, heads, half, half, head_dim, kv_heads, True), dtype)
    below = _neuron_attention(target, (batch, heads, half, half, head_dim, kv_heads, False), dtype)
    return 2 * diagonal + below


def ops_seconds(machine: Machine, ops: list[Op], precision: str) -> float:
    return sum(op_seconds(machine, op, precision) for op in ops)


def collective_seconds(machine: Machine, op: str, size_bytes: float, group: int, stride: int) -> float:
    """One collective over a group of `group` ranks placed `stride` ranks apart (tp innermost).

    A group that fits in one node is a collective over `group` ranks there. A group spread over
    nodes, k members per node, runs beside the node's other groups, which share the node's EFA:
    it is costed as one collective over all the ranks of its nodes with the node's whole data
    (size x ranks-per-node / k), the same bytes through each node's network.
    """
    if group <= 1 or size_bytes <= 0:
        return 0.0
    per_node = machine.ranks
    if group * stride <= per_node:
        ranks, size = group, size_bytes
    else:
        members_per_node = max(1, per_node // stride)
        nodes = -(-group // members_per_node)
        ranks, size = nodes * per_node, size_bytes * per_node / members_per_node
    size = int(size) // 2 * 2
    if machine.gpu:
        return gpu.collective_seconds(machine, op, size, ranks)
    return _neuron_collective(machine.name, op, size, ranks)


@cache
def _neuron_collective(instance: str, op: str, size: int, ranks: int) -> float:
    return system.collective_time(op, size, ranks, instance=instance).seconds
