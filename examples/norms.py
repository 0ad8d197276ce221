"""RMSNorm and LayerNorm in NKI style (LayerNorm statistics with bn_stats / bn_aggr).

    python examples/norms.py
"""

import numpy as np

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


def _broadcast_row(vector, partitions):
    """A [D] HBM vector copied onto `partitions` SBUF partitions (a partition-broadcast DMA)."""
    tile = nl.ndarray((partitions, vector.shape[0]), dtype=vector.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=vector.reshape((1, vector.shape[0])).broadcast(0, partitions))
    return tile


@nki.jit
def rmsnorm(x, weight, eps=1e-6):
    rows, width = x.shape
    tile = nl.tile_size.pmax
    out = nl.ndarray((rows, width), dtype=x.dtype, buffer=nl.shared_hbm)
    w = _broadcast_row(weight, tile)
    for r in nl.affine_range(rows // tile):
        data = nl.ndarray((tile, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=x[r * tile:(r + 1) * tile, :])
        squares = nl.ndarray((tile, width), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares, op=nl.square, data=data, reduce_op=nl.add, reduce_res=sum_sq)
        rstd = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=sum_sq, scale=1.0 / width, bias=eps)
        result = nl.ndarray((tile, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=result, data=data, op0=nl.multiply, operand0=rstd, op1=nl.multiply,
                                  operand1=w)
        nisa.dma_copy(dst=out[r * tile:(r + 1) * tile, :], src=result)
    return out


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    rows, width = x.shape
    tile, chunk = nl.tile_size.pmax, nl.tile_size.bn_stats_fmax
    chunks = (width + chunk - 1) // chunk
    out = nl.ndarray((rows, width), dtype=x.dtype, buffer=nl.shared_hbm)
    g, b = _broadcast_row(gamma, tile), _broadcast_row(beta, tile)
    for r in nl.affine_range(rows // tile):
        data = nl.ndarray((tile, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=x[r * tile:(r + 1) * tile, :])
        stats = nl.ndarray((tile, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(chunks):
            end = min(width, (c + 1) * chunk)
            nisa.bn_stats(dst=stats[:, 6 * c:6 * (c + 1)], data=data[:, c * chunk:end])
        moments = nl.ndarray((tile, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=moments, data=stats)
        rstd = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=moments[:, 1:2], bias=eps)
        normed = nl.ndarray((tile, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=normed, data=data, op0=nl.subtract, operand0=moments[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        result = nl.ndarray((tile, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=normed, data1=normed, data2=g, op=nl.multiply)
        nisa.tensor_tensor(dst=result, data1=normed, data2=b, op=nl.add)
        nisa.dma_copy(dst=out[r * tile:(r + 1) * tile, :], src=result)
    return out


def rmsnorm_reference(x, weight, eps=1e-6):
    x = x.astype(np.float32)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * weight.astype(np.float32)


def layernorm_reference(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float32)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma.astype(np.float32) + beta.astype(np.float32)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    w, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    print("rmsnorm max abs error:", np.abs(nki.simulate(rmsnorm)(x, w) - rmsnorm_reference(x, w)).max())
    print("layernorm max abs error:",
          np.abs(nki.simulate(layernorm)(x, w, b) - layernorm_reference(x, w, b)).max())
