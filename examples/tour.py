"""A tour of trnsim: run the example kernels on the emulator, check them, and train on "neuron".

    trnsim run --report trnsim-report examples/tour.py   # also times every kernel on trn1/2/3
    python examples/tour.py                              # values only

Part 1 (examples/run_all.py) runs each example kernel in `trnsim.nki.simulate` and compares it
with a numpy reference at the tolerance its dtype allows; the tour exits non-zero if one does not
match. Part 2 (when torch is installed) trains a small MLP for a few steps on the emulated
device and prints the device time and dollar cost the same steps would take on trn1 and trn2.
"""

from __future__ import annotations

import sys

import run_all  # examples/run_all.py: every example kernel with its reference and tolerance
from rich.console import Console
from rich.table import Table

console = Console()


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
    all_match = run_all.check_all(target="trn2")
    train_on_neuron()
    return 0 if all_match else 1


if __name__ == "__main__":
    sys.exit(main())
