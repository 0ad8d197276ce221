"""A stand-in for the op-cost library: a roofline at the target's peaks, so plan logic is tested
in milliseconds. Tests of the real wiring do not use it."""

import pytest

from trnsim.planner import ops, optime


def _roofline(target, family, args, dtype):
    op = ops.Op(family, args)
    return max(ops.flops(op) / 80e12, ops.traffic(op, 2) / 300e9) + 2e-6


def _roofline_attention(target, args, dtype):
    return _roofline(target, "attention", args, dtype)


@pytest.fixture
def roofline_costs(monkeypatch):
    monkeypatch.setattr(optime, "_neuron_op", _roofline)
    monkeypatch.setattr(optime, "_neuron_attention", _roofline_attention)
