"""Op-cost library speed and agreement: the fast tier on LLM-sized ops, and fast vs exact where
both run. Prints one JSON object.

    python bench/cost.py [--target trn2] [--skip-exact]

* `matmul_8192x8192x28672_s`: one bf16 matmul, first call (traces its clipped tile grids) and
  again (cached). Goal: under 50 ms. The first call is timed in this process and in `--fresh`
  new processes (5 by default; trnsim imported, the call timed alone: the median and every run),
  beside `python_reference_s`, a fixed pure-Python loop timed here, so that figures from machines
  of different speed can be compared.
* `llama3_8b_step_s`: every op of a forward+backward step of a Llama-3-8B-shaped model (32 layers,
  d 4096, 32 heads / 8 KV heads, FFN 14336, vocabulary 128256, seq 4096, batch 1) plus the AdamW
  step, costed from a cold cache. Goal: under 5 s. The step's predicted device time is reported
  beside it (one NeuronCore; no parallelism).
* `fast_vs_exact`: relative error of the fast tier against the exact one on shapes whose grids
  the fast tier extrapolates. Goal: every one within 5%.
* `random_matmuls` (with `--random N`): the same on N random bf16 and fp8 matmul shapes (seeded;
  each takes seconds to trace exactly): mean and largest error, and how many are over 5%. The
  default seed, 139, drew its shapes after the fast tier's rules were last changed (2026-11-28,
  tenth session); seeds 7, 23, 41, 61, 83 and 107 were looked at while choosing them
  (docs/timing.md).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time

from trnsim import cost
from trnsim.core.runtime import current as current_runtime

LLAMA = {"layers": 32, "dim": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 14336,
         "vocab": 128256, "seq": 4096, "batch": 1, "params": 8_030_000_000}
"""Llama-3-8B's shape (Meta's model card) at the sequence length the issue names."""

AGREEMENT = [("matmul", (2000, 3000, 1000)), ("matmul", (8192, 256, 16384)), ("matmul", (4096, 1024, 4096)),
             ("elementwise", (600 * 65536, 2)), ("norm", (8192, 8192)), ("softmax", (20000, 3000)),
             ("optimizer_step", (600 * 65536,)), ("attention", (1, 4, 4096, 4096, 128))]


def _linear(tokens: int, fan_in: int, fan_out: int, target: str) -> list:
    """A linear layer's forward matmul and its two backward matmuls (input and weight grads)."""
    shapes = [(tokens, fan_in, fan_out), (tokens, fan_out, fan_in), (fan_in, tokens, fan_out)]
    return [cost.matmul(*shape, target=target) for shape in shapes]


def llama_layer(target: str) -> list:
    """Forward + backward op costs of one decoder layer (backward of elementwise ops and norms as
    one more pass each; attention's backward as 2.5 fused forwards, counted by `step_costs`)."""
    m = LLAMA
    tokens = m["batch"] * m["seq"]
    qkv = m["dim"] + 2 * m["kv_heads"] * m["head_dim"]
    ops = _linear(tokens, m["dim"], qkv, target) + _linear(tokens, m["dim"], m["dim"], target)
    ops += _linear(tokens, m["dim"], 2 * m["ffn"], target) + _linear(tokens, m["ffn"], m["dim"], target)
    for _pass in range(2):  # forward, then backward
        ops += [cost.norm(tokens, m["dim"], target=target)] * 2
        ops += [cost.elementwise(tokens * qkv, 2, target=target),                  # rotary embedding
                cost.elementwise(tokens * m["ffn"], 2, target=target, engine="scalar"),  # SiLU gate
                cost.elementwise(tokens * m["dim"], 2, target=target)]                # residual add
    return ops


def step_costs(target: str) -> tuple[float, int]:
    """(predicted seconds of one training step on one core, number of op costs asked)."""
    m = LLAMA
    tokens = m["batch"] * m["seq"]
    layer = llama_layer(target)
    attention = cost.attention(m["batch"], m["heads"], m["seq"], m["seq"], m["head_dim"],
                               kv_heads=m["kv_heads"], causal=True, target=target)
    per_layer = sum(c.seconds for c in layer) + 3.5 * attention.seconds  # forward + 2.5 backward
    head = _linear(tokens, m["dim"], m["vocab"], target) + [
        cost.softmax(tokens, m["vocab"], target=target), cost.embedding(tokens, m["dim"], target=target),
        cost.optimizer_step(m["params"], target=target)]
    return m["layers"] * per_layer + sum(c.seconds for c in head), len(layer) + 1 + len(head)


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


_FIRST_CALL = ("import time; from trnsim import cost; start = time.perf_counter(); "
               "cost.matmul(8192, 8192, 28672, target={target!r}); print(time.perf_counter() - start)")


def first_calls_in_fresh_processes(target: str, runs: int) -> list[float]:
    """Seconds of the first matmul cost in each of `runs` new Python processes."""
    command = [sys.executable, "-c", _FIRST_CALL.format(target=target)]
    return [round(float(subprocess.run(command, capture_output=True, text=True, check=True).stdout), 4)
            for _ in range(runs)]


def python_reference_s() -> float:
    """Best of three runs of a fixed pure-Python loop (dict and tuple work, like a trace's)."""
    def loop():
        table, total = {}, 0
        for i in range(200_000):
            key = (i & 1023, i >> 10)
            total += table.setdefault(key, i)
        return total
    return round(min(_seconds(loop) for _ in range(3)), 4)


def _cpu_and_wall(fn):
    """(result, CPU seconds of this process, wall seconds): a shared machine inflates the wall."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = fn()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def agreement(target: str) -> dict[str, float]:
    errors = {}
    for family, args in AGREEMENT:
        fast = cost.op(family, *args, target=target).seconds
        exact = cost.op(family, *args, target=target, tier="exact").seconds
        errors[f"{family}{list(args)}"] = round(fast / exact - 1, 4)
    return errors


def random_matmuls(count: int, target: str, seed: int) -> dict:
    """Fast-vs-exact errors on `count` random matmuls of 5e9 to 2.5e11 multiply-adds whose grids
    the fast tier clips: sizes anywhere up to 8200, or whole tiles, and short contractions."""
    rng, errors = random.Random(seed), {}
    while len(errors) < count:
        m = rng.choice([rng.randint(100, 8200), 128 * rng.randint(1, 64)])
        k = rng.choice([rng.randint(100, 8200), 128 * rng.randint(1, 64), rng.randint(100, 600)])
        n = rng.choice([rng.randint(100, 8200), 512 * rng.randint(1, 16)])
        dtype = rng.choice(["bfloat16", "float8_e4m3"])
        if not 5e9 <= m * k * n <= 2.5e11:
            continue
        fast = cost.matmul(m, k, n, dtype=dtype, target=target).seconds
        exact = cost.matmul(m, k, n, dtype=dtype, target=target, tier="exact").seconds
        errors[f"{dtype}{[m, k, n]}"] = round(fast / exact - 1, 4)
    sizes = [abs(e) for e in errors.values()]
    return {"seed": seed, "mean_abs": round(statistics.mean(sizes), 4), "max_abs": max(sizes),
            "over_5_percent": {shape: e for shape, e in errors.items() if abs(e) > 0.05}, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="trn2")
    parser.add_argument("--skip-exact", action="store_true", help="skip the fast-vs-exact agreement")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="also check N random matmul shapes against the exact tier (minutes)")
    parser.add_argument("--seed", type=int, default=139)
    parser.add_argument("--fresh", type=int, default=5, metavar="N",
                        help="time the first call in N new processes too (default 5)")
    args = parser.parse_args()
    current_runtime().reset()
    cold = _seconds(lambda: cost.matmul(8192, 8192, 28672, target=args.target))
    warm = _seconds(lambda: cost.matmul(8192, 8192, 28672, target=args.target))
    current_runtime().reset()
    (step_s, asked), step_cpu, step_wall = _cpu_and_wall(lambda: step_costs(args.target))
    fresh = first_calls_in_fresh_processes(args.target, args.fresh) if args.fresh else []
    result = {
        "target": args.target,
        "python_reference_s": python_reference_s(),
        "matmul_8192x8192x28672_s": {"first_call": round(cold, 4), "cached": round(warm, 6), "goal": 0.05,
                                     "first_call_fresh_processes": {
                                         "median": statistics.median(fresh) if fresh else None,
                                         "runs": fresh}},
        "llama3_8b_step_s": {"cost_all_ops_cpu": round(step_cpu, 3), "cost_all_ops_wall": round(step_wall, 3),
                             "goal": 5.0,
                             "distinct_calls": asked, "predicted_step_s": round(step_s, 3)},
    }
    if not args.skip_exact:
        errors = agreement(args.target)
        result["fast_vs_exact"] = {"errors": errors, "max_abs": max(abs(e) for e in errors.values()),
                                   "goal": 0.05}
    if args.random:
        result["random_matmuls"] = random_matmuls(args.random, args.target, args.seed)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
