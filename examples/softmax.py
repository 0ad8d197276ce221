"""Row softmax in NKI style: 128 rows per tile, max-subtracted exp with a fused row sum.

    python examples/softmax.py
"""

import numpy as np

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


@nki.jit
def softmax_rows(x):
    rows, cols = x.shape
    tile = nl.tile_size.pmax
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range((rows + tile - 1) // tile):
        count = min(tile, rows - r * tile)
        data = nl.ndarray((count, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=x[r * tile:r * tile + count, :])
        neg_max = nl.ndarray((count, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=data, axis=1, negate=True, keepdims=True)
        exps = nl.ndarray((count, cols), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((count, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=exps, op=nl.exp, data=data, bias=neg_max, reduce_op=nl.add, reduce_res=total)
        inverse = nl.ndarray((count, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inverse, data=total)
        result = nl.ndarray((count, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=result, data=exps, op0=nl.multiply, operand0=inverse)
        nisa.dma_copy(dst=out[r * tile:r * tile + count, :], src=result)
    return out


def reference(x):
    x = x.astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


if __name__ == "__main__":
    data = np.random.default_rng(0).standard_normal((300, 512)).astype(np.float32)
    result = nki.simulate(softmax_rows)(data)
    print("softmax max abs error:", np.abs(result - reference(data)).max())
