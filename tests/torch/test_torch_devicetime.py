"""The neuron device's op times come from the op-cost library (trnsim.cost)."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.torch
from trnsim import cost


def test_attention_is_one_fused_kernel_per_call():
    q = torch.randn(2, 4, 256, 64, device="neuron")
    k, v = torch.randn(2, 4, 384, 64, device="neuron"), torch.randn(2, 4, 384, 64, device="neuron")
    with trnsim.torch.profile(target="trn2") as prof:
        F.scaled_dot_product_attention(q, k, v)
    report = prof.report()
    [(name, timed)] = [(op, t) for op, t in report.per_op.items() if "attention" in op]
    fused = cost.attention(2, 4, 256, 384, 64, causal=False, dtype="float32", target="trn2")
    assert timed.count == 1 and timed.device_s == pytest.approx(fused.seconds, rel=1e-12), name


def test_matmul_and_elementwise_times_are_the_cost_librarys():
    a, b = torch.randn(1000, 300, device="neuron"), torch.randn(300, 700, device="neuron")
    with trnsim.torch.profile(target="trn1") as prof:
        c = a @ b
        torch.relu(c)
    per_op = prof.report().per_op
    assert per_op["aten.mm.default"].device_s == cost.matmul(1000, 300, 700, dtype="float32",
                                                             target="trn1").seconds
    activation = cost.elementwise(700_000, 1, dtype="float32", target="trn1", engine="scalar")
    assert per_op["aten.relu.default"].device_s == activation.seconds
