"""Causal flash-attention forward for one head in NKI style.

Queries go 128 at a time; keys and values stream in tiles of 128. The causal mask comes from
`affine_select` (keep where query index - key index >= 0), and the softmax is computed online:
a running row max and row sum rescale the partial output as each key tile arrives.

    python examples/flash_attention.py
"""

import numpy as np

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

NEG_LARGE = -30000.0  # masked scores: exp() of them underflows to 0 in fp32


@nki.jit
def flash_attention_causal(q, k, v):
    """softmax(q k^T / sqrt(d) + causal mask) v for q, k, v of shape [S, d], d <= 128."""
    seq, d = q.shape
    tile = nl.tile_size.pmax
    scale = 1.0 / float(np.sqrt(d))
    out = nl.ndarray((seq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    for qi in nl.affine_range(seq // tile):
        q_t = nl.ndarray((d, tile), dtype=q.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_t, src=q[qi * tile:(qi + 1) * tile, :].permute((1, 0)))
        run_max = nl.full((tile, 1), NEG_LARGE, dtype=nl.float32)
        run_sum = nl.zeros((tile, 1), dtype=nl.float32)
        acc = nl.zeros((tile, d), dtype=nl.float32)
        for ki in nl.affine_range(qi + 1):  # tiles above the diagonal are fully masked: skip them
            k_t = nl.ndarray((d, tile), dtype=k.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=k_t, src=k[ki * tile:(ki + 1) * tile, :].permute((1, 0)))
            v_tile = nl.ndarray((tile, d), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=v_tile, src=v[ki * tile:(ki + 1) * tile, :])
            _attend_tile(q_t, k_t, v_tile, (qi - ki) * tile, scale, run_max, run_sum, acc)
        inverse = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inverse, data=run_sum)
        result = nl.ndarray((tile, d), dtype=q.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=result, data=acc, op0=nl.multiply, operand0=inverse)
        nisa.dma_copy(dst=out[qi * tile:(qi + 1) * tile, :], src=result)
    return out


def _attend_tile(q_t, k_t, v_tile, diagonal_offset, scale, run_max, run_sum, acc):
    """Fold one key/value tile into the running max, sum and output accumulator."""
    tile, d = v_tile.shape
    scores_psum = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=scores_psum, stationary=q_t, moving=k_t)
    scores = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=scores, op=nl.copy, data=scores_psum, scale=scale)
    masked = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=masked, pattern=[[-1, tile]], channel_multiplier=1, on_true_tile=scores,
                       on_false_value=NEG_LARGE, cmp_op=nl.greater_equal, offset=diagonal_offset)
    tile_max = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=tile_max, op=nl.maximum, data=masked, axis=1, keepdims=True)
    new_max = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=new_max, data1=run_max, data2=tile_max, op=nl.maximum)
    neg_max = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=neg_max, data=new_max, op0=nl.multiply, operand0=-1.0)
    probs = nl.ndarray((tile, tile), dtype=v_tile.dtype, buffer=nl.sbuf)
    row_sum = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=probs, op=nl.exp, data=masked, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum)
    correction = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=correction, op=nl.exp, data=run_max, bias=neg_max)
    nisa.scalar_tensor_tensor(dst=run_sum, data=run_sum, op0=nl.multiply, operand0=correction,
                              op1=nl.add, operand1=row_sum)
    nisa.tensor_copy(dst=run_max, src=new_max)
    probs_t_psum = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=probs_t_psum, data=probs)
    probs_t = nl.ndarray((tile, tile), dtype=v_tile.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=probs_t, src=probs_t_psum)
    pv = nl.ndarray((tile, d), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=pv, stationary=probs_t, moving=v_tile)
    nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=correction, op1=nl.add,
                              operand1=pv)


def reference(q, k, v):
    q, k, v = (a.astype(np.float32) for a in (q, k, v))
    scores = q @ k.T / np.sqrt(q.shape[1])
    scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v


if __name__ == "__main__":
    import ml_dtypes
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((512, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    result = nki.simulate(flash_attention_causal)(q, k, v).astype(np.float32)
    print("flash attention max abs error:", np.abs(result - reference(q, k, v)).max())
