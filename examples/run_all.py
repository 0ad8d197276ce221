"""Run every example kernel on trnsim and compare it with its numpy reference.

    python examples/run_all.py [--target trn2]

Prints a table (instructions issued, worst error, tolerance) and exits non-zero if any
kernel misses its tolerance. bf16 kernels are judged relative to the output's scale.
"""

import argparse
import sys

import flash_attention
import matmul
import ml_dtypes
import norms
import numpy as np
import selective_scan
import softmax
from rich.console import Console
from rich.table import Table

import trnsim.nki as nki

BF16 = ml_dtypes.bfloat16


def cases(rng):
    """(name, kernel, inputs, reference, tolerance on max |error| / max |reference|)."""
    lhsT, rhs = rng.standard_normal((512, 512)).astype(BF16), rng.standard_normal((512, 1024)).astype(BF16)
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    w, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    q, k, v = (rng.standard_normal((512, 64)).astype(BF16) for _ in range(3))
    xs = rng.standard_normal((128, 256)).astype(np.float32)
    dt = rng.uniform(0.01, 0.1, (128, 256)).astype(np.float32)
    A = -rng.uniform(0.5, 2.0, (128, 8)).astype(np.float32)
    B, C = (rng.standard_normal((8, 256)).astype(np.float32) for _ in range(2))
    return [
        ("matmul_tiled (bf16)", matmul.matmul_tiled, (lhsT, rhs), matmul.reference, 2 ** -8),
        ("matmul_blocked (bf16)", matmul.matmul_blocked, (lhsT, rhs), matmul.reference, 2 ** -8),
        ("softmax", softmax.softmax_rows, (x,), softmax.reference, 1e-5),
        ("rmsnorm", norms.rmsnorm, (x, w), norms.rmsnorm_reference, 1e-5),
        ("layernorm (bn_stats/bn_aggr)", norms.layernorm, (x, w, b), norms.layernorm_reference, 1e-5),
        ("causal flash attention (bf16)", flash_attention.flash_attention_causal, (q, k, v),
         flash_attention.reference, 2e-2),
        ("selective scan", selective_scan.selective_scan, (xs, dt, A, B, C), selective_scan.reference, 1e-5),
    ]


def check_all(target: str = "trn2") -> bool:
    """Run every case on `target` and print a table; True when every kernel is within tolerance."""
    table = Table(title=f"Example kernels on an emulated NeuronCore ({target}) vs numpy references")
    for column in ("kernel", "instr", "error/scale", "tolerance", "match"):
        table.add_column(column, no_wrap=column == "kernel")
    all_match = True
    for name, kernel, inputs, reference, tolerance in cases(np.random.default_rng(0)):
        result = np.asarray(nki.simulate(kernel, target=target)(*inputs), np.float64)
        expected = np.asarray(reference(*inputs), np.float64)
        error = np.abs(result - expected).max() / np.abs(expected).max()
        ok = bool(np.isfinite(result).all() and error <= tolerance)
        all_match &= ok
        table.add_row(name, str(len(kernel.last_trace)), f"{error:.1e}", f"{tolerance:.0e}",
                      "[green]yes[/]" if ok else "[red]NO[/]")
    Console().print(table)
    return all_match


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="trn2", help="trn1, inf2, trn2 or trn3")
    return 0 if check_all(parser.parse_args(argv).target) else 1


if __name__ == "__main__":
    sys.exit(main())
