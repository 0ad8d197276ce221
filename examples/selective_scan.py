"""A Mamba-style selective scan in NKI style, with the recurrence on `tensor_tensor_scan`.

Channels sit on partitions and time on the free dim. For each state n:
    h[t] = exp(delta[t] * A[n]) * h[t-1] + delta[t] * B[n, t] * x[t]
    y[t] += C[n, t] * h[t]

    python examples/selective_scan.py
"""

import numpy as np

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


@nki.jit
def selective_scan(x, delta, A, B, C):
    """x, delta: [channels, L]; A: [channels, N]; B, C: [N, L]. Returns y: [channels, L]."""
    channels, length = x.shape
    states = A.shape[1]
    out = nl.ndarray((channels, length), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
    dt = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
    a = nl.ndarray((channels, states), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=dt, src=delta)
    nisa.dma_copy(dst=a, src=A)
    dt_x = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=dt_x, data1=dt, data2=xs, op=nl.multiply)
    y = nl.zeros((channels, length), dtype=nl.float32)
    for n in nl.affine_range(states):
        b_row = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
        c_row = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=b_row, src=B[n:n + 1, :].broadcast(0, channels))
        nisa.dma_copy(dst=c_row, src=C[n:n + 1, :].broadcast(0, channels))
        decay = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=decay, op=nl.exp, data=dt, scale=a[:, n:n + 1])
        drive = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=drive, data1=dt_x, data2=b_row, op=nl.multiply)
        h = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=h, data0=decay, data1=drive, initial=0.0, op0=nl.multiply, op1=nl.add)
        contribution = nl.ndarray((channels, length), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=contribution, data1=h, data2=c_row, op=nl.multiply)
        nisa.tensor_tensor(dst=y, data1=y, data2=contribution, op=nl.add)
    result = nl.ndarray((channels, length), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=y)
    nisa.dma_copy(dst=out, src=result)
    return out


def reference(x, delta, A, B, C):
    channels, length = x.shape
    h = np.zeros((channels, A.shape[1]), np.float64)
    y = np.zeros((channels, length), np.float64)
    for t in range(length):
        h = np.exp(delta[:, t:t + 1] * A) * h + delta[:, t:t + 1] * B[:, t][None, :] * x[:, t:t + 1]
        y[:, t] = (h * C[:, t][None, :]).sum(axis=1)
    return y


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    delta = rng.uniform(0.01, 0.1, (128, 256)).astype(np.float32)
    A = -rng.uniform(0.5, 2.0, (128, 8)).astype(np.float32)
    B, C = (rng.standard_normal((8, 256)).astype(np.float32) for _ in range(2))
    result = nki.simulate(selective_scan)(x, delta, A, B, C)
    print("selective scan max abs error:", np.abs(result - reference(x, delta, A, B, C)).max())
