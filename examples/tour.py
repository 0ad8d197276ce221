"""A tour of trnsim: run the example kernels on the emulator, check them, and train on "neuron".

    trnsim run --report trnsim-report examples/tour.py   # also times every kernel on trn1/2/3
    python examples/tour.py                              # values only

Part 1 runs each example kernel in `trnsim.nki.simulate` and compares it with a numpy reference at
the tolerance its dtype allows; it exits non-zero if one does not match. Part 2 (when torch is
installed) trains a small MLP for a few steps on the emulated device and prints the device time
and dollar cost the same steps would take on trn1 and trn2.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import ml_dtypes
import numpy as np
from rich.console import Console
from rich.table import Table

import trnsim.nki as nki

HERE = pathlib.Path(__file__).resolve().parent
BF16 = ml_dtypes.bfloat16
console = Console()


def _example(name: str):
    """Load examples/<name>.py as a module (examples/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"trnsim_example_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_cases(rng: np.random.Generator):
    """(label, kernel, inputs, reference, tolerance) for every example kernel."""
    matmul, softmax, norms = _example("matmul"), _example("softmax"), _example("norms")
    attention, scan = _example("flash_attention"), _example("selective_scan")
    lhsT, rhs = rng.standard_normal((512, 512)).astype(BF16), rng.standard_normal((512, 1024)).astype(BF16)
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    w, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    q, k, v = (rng.standard_normal((512, 64)).astype(BF16) for _ in range(3))
    xs = rng.standard_normal((128, 256)).astype(np.float32)
    delta = rng.uniform(0.01, 0.1, (128, 256)).astype(np.float32)
    A = -rng.uniform(0.5, 2.0, (128, 8)).astype(np.float32)
    B, C = (rng.standard_normal((8, 256)).astype(np.float32) for _ in range(2))
    # bf16 outputs are rounded once from fp32: relative error up to 2^-8 of the output scale.
    return [
        ("blocked matmul, bf16 in, fp32 PSUM", matmul.matmul_blocked, (lhsT, rhs), matmul.reference, 2 ** -8),
        ("softmax, fp32", softmax.softmax_rows, (x,), softmax.reference, 1e-5),
        ("RMSNorm, fp32", norms.rmsnorm, (x, w), norms.rmsnorm_reference, 1e-4),
        ("LayerNorm (bn_stats/bn_aggr), fp32", norms.layernorm, (x, w, b), norms.layernorm_reference, 1e-4),
        ("causal flash attention, bf16", attention.flash_attention_causal, (q, k, v), attention.reference,
         2e-2),
        ("selective scan, fp32", scan.selective_scan, (xs, delta, A, B, C), scan.reference, 1e-4),
    ]


def run_kernels() -> bool:
    """Part 1: every example kernel against its reference. True when all match."""
    table = Table(title="Example kernels on the emulated NeuronCore (trn2) vs numpy references")
    for column in ("kernel", "instructions", "max error / scale", "tolerance", "match"):
        table.add_column(column)
    all_match = True
    for label, kernel, inputs, reference, tolerance in kernel_cases(np.random.default_rng(0)):
        result = nki.simulate(kernel, target="trn2")(*inputs).astype(np.float32)
        expected = np.asarray(reference(*inputs), dtype=np.float32)
        error = float(np.abs(result - expected).max() / max(np.abs(expected).max(), 1e-30))
        match = bool(np.isfinite(result).all() and error <= tolerance)
        all_match &= match
        table.add_row(label, str(len(kernel.last_trace)), f"{error:.1e}", f"{tolerance:.0e}",
                      "[green]yes[/]" if match else "[red]NO[/]")
    console.print(table)
    return all_match


def train_on_neuron(steps: int = 3) -> None:
    """Part 2: an unchanged training loop on torch.device("neuron"), with its device time and cost."""
    try:
        import torch
    except ImportError:
        console.print("torch is not installed: skipping the training part (pip install -e '.[torch]')")
        return
    import trnsim.torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    model = model.to("neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(64, 256, device="neuron")
    with trnsim.torch.profile(target="trn2") as prof:
        for _ in range(steps):
            loss = (model(data) - data).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    table = Table(title=f"{steps} training steps of a 0.5M-parameter MLP on device 'neuron'")
    for column in ("target", "device time", "matmul share", "cost (one core's share)"):
        table.add_column(column)
    for target in ("trn1", "trn2"):
        report = prof.report(target)
        table.add_row(target, f"{report.total_s * 1e6:,.1f} µs", f"{report.matmul_share:.0%}",
                      f"${report.cost_usd:.2e}")
    console.print(f"final loss on neuron: {loss.item():.4f}")
    console.print(table)


def main() -> int:
    all_match = run_kernels()
    train_on_neuron()
    return 0 if all_match else 1


if __name__ == "__main__":
    sys.exit(main())
