"""Eager training-step time on torch.device("neuron") divided by the same step on CPU (goal <= 1.2).

The model is the GPT of tests/torch/torch_gpt.py at the size of baselines.md row 6 (4 layers,
d_model 512, 8 heads, sequence 256, batch 8, vocab 8192, AdamW). Steps on the two devices are
interleaved so drift on a shared machine hits both alike; the medians are compared. `tiny` repeats
the comparison on a GPT small enough that the device's per-op overhead dominates (2 layers,
d_model 64, sequence 32, batch 4, vocab 256; goal <= 1.5). `per_op_us` times one 8x8 add on CPU,
on neuron, and on the thinnest tensor subclass PyTorch's Python dispatch allows (a
`_make_wrapper_subclass` whose `__torch_dispatch__` only unwraps, runs the op and wraps): the floor
of any device written in Python, measured in the same run.

    python bench/torch_device.py [--steps 5] [--d-model 512] [--device-time]

With --device-time, one more step runs under trnsim.torch.profile and the JSON also carries the
step's estimated device time and cost on trn1 and trn2 (one NeuronCore each).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

import trnsim.torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "torch"))
from torch_gpt import GPT, batches  # noqa: E402


def _stepper(model, device: str, data):
    """A function that runs one AdamW training step on `device`; returns its seconds and loss."""
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx, target = (t.to(device) for t in data)

    def step() -> tuple[float, float]:
        start = time.perf_counter()
        loss = F.cross_entropy(model(idx).flatten(0, 1), target.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.item()
        return time.perf_counter() - start, value

    return step


def _compare(model, data, steps: int) -> tuple[float, float, bool, object]:
    """Median step seconds on neuron and on CPU, whether every loss matched bitwise, and the
    neuron stepper (for profiling one more step)."""
    cpu_step = _stepper(model, "cpu", data)
    neuron_step = _stepper(copy.deepcopy(model), "neuron", data)
    runs = [(cpu_step(), neuron_step()) for _ in range(steps + 1)]  # the first is a warm-up
    cpu_s, neuron_s = [c[0] for c, _ in runs[1:]], [n[0] for _, n in runs[1:]]
    equal = all(c[1] == n[1] for c, n in runs)
    return statistics.median(neuron_s), statistics.median(cpu_s), equal, neuron_step


def _tiny(steps: int) -> dict:
    torch.manual_seed(0)
    model = GPT(vocab=256, d_model=64, layers=2, heads=4, seq=32)
    value, baseline, equal, _ = _compare(model, batches(1, batch=4, seq=32, vocab=256)[0], steps)
    return {"value": round(value, 5), "baseline": round(baseline, 5), "ratio": round(value / baseline, 3),
            "goal": "ratio <= 1.5", "losses_bitwise_equal": equal,
            "model": "GPT d_model 64, 2 layers, seq 32, batch 4, vocab 256"}


class _Passthrough(torch.Tensor):
    """The thinnest Python device tensor: wraps a CPU tensor and forwards every aten op to it."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, strides=elem.stride())

    def __init__(self, elem):
        self.elem = elem

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrapped = [a.elem if isinstance(a, _Passthrough) else a for a in args]
        return _Passthrough(func(*unwrapped, **(kwargs or {})))


def _per_op(repeats: int = 20000) -> dict:
    """Microseconds per 8x8 add: CPU, neuron, and the pass-through subclass (medians of 5 runs)."""
    cpu = torch.randn(8, 8), torch.randn(8, 8)
    pairs = {"cpu": cpu, "neuron": tuple(t.to("neuron") for t in cpu),
             "python_subclass_floor": tuple(_Passthrough(t) for t in cpu)}
    found = {}
    for name, (a, b) in pairs.items():
        for _ in range(1000):
            a + b
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(repeats):
                a + b
            runs.append((time.perf_counter() - start) / repeats * 1e6)
        found[name] = round(statistics.median(runs), 2)
    found["goal"] = "neuron <= cpu + 5"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device-time", action="store_true", help="also report trn1/trn2 device time")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT(vocab=8192, d_model=args.d_model, layers=args.layers, heads=8, seq=args.seq)
    data = batches(1, batch=args.batch, seq=args.seq, vocab=8192)[0]
    value, baseline, equal, neuron_step = _compare(model, data, args.steps)
    extra = {"tiny": _tiny(max(args.steps, 20)), "per_op_us": _per_op()}
    if args.device_time:
        with trnsim.torch.profile() as prof:
            neuron_step()
        extra["device_step"] = {target: {"s": report.total_s, "usd": report.cost_usd,
                                         "matmul_share": round(report.matmul_share, 3),
                                         "instance": report.instance}
                                for target, report in ((t, prof.report(t)) for t in ("trn1", "trn2"))}
    print(json.dumps({
        "id": "torch_device",
        "measure": f"eager GPT training step on neuron, median of {args.steps} s (d_model {args.d_model}, "
                   f"{args.layers} layers, seq {args.seq}, batch {args.batch}, AdamW)",
        "value": round(value, 4),
        "baseline": {"name": "same step on CPU torch", "value": round(baseline, 4)},
        "ratio": round(value / baseline, 3),
        "goal": "ratio <= 1.2",
        "losses_bitwise_equal": equal,
        "fallback_ops": trnsim.torch.fallback_counts(),
        **extra,
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "numpy": np.__version__},
    }))


if __name__ == "__main__":
    main()
