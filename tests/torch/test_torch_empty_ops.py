"""Ops on empty tensors are timed like the smallest launch (kernels themselves refuse empty shapes)."""

import torch

import trnsim.torch
from trnsim.torch.devicetime import op_time_s


def test_an_empty_matmul_costs_one_launch():
    empty = op_time_s("aten.mm.default", (((0, 4), "float32"), ((4, 3), "float32")), (((0, 3), "float32"),),
                      target="trn2")
    one_row = op_time_s("aten.mm.default", (((1, 4), "float32"), ((4, 3), "float32")), (((1, 3), "float32"),),
                        target="trn2")
    assert empty == one_row > 0


def test_a_profile_with_empty_tensors_runs():
    with trnsim.torch.profile(target="trn2") as prof:
        product = torch.ones(0, 4, device="neuron") @ torch.ones(4, 3, device="neuron")
    assert product.shape == (0, 3)
    assert prof.report("trn2").total_s > 0
