"""The built-in NKI kernels whose traces give the neuron device its per-op time.

Four shapes of work cover the aten ops a model reaches: a tiled matmul (TensorE, PSUM accumulate),
a streaming elementwise pass (Vector or Scalar engine), a row-wise pass (reduce, then optionally
write the rows again: softmax, norms, losses), and a DMA copy. They are run in trace-only mode by
`trnsim.cost` (for the torch device and the planner), which times the trace with
`trnsim.timing.schedule`: the same instruction
costs every NKI kernel is timed with. Outer loops are split over the launch grid, so a launch of 2
programs models one logical core (LNC=2). Partial tiles are issued at their true size.
"""

from __future__ import annotations

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

STREAM_FREE = 512
"""Elements per partition in one streaming tile: 2 KiB rows of fp32, the size at which a DMA
reaches full efficiency (nki.md §1.5), in tiles small enough to spread over the DMA queues."""


def _mine(count: int) -> range:
    """The iterations of an outer loop of `count` that this program of the grid runs."""
    programs = nl.num_programs(0) if nl.program_ndim() else 1
    return range(nl.program_id(0) if nl.program_ndim() else 0, count, programs)


def _tiles(total: int, size: int) -> list[tuple[int, int]]:
    """(start, length) of each tile of `size` along an axis of `total` (the last may be partial)."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


@nki.jit
def matmul(lhsT, rhs):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N]: one moving block of rhs stays in SBUF per N tile."""
    k_size, m_size = lhsT.shape
    n_size = rhs.shape[1]
    k_tiles = _tiles(k_size, nl.tile_size.pmax)
    m_tiles = _tiles(m_size, nl.tile_size.gemm_stationary_fmax)
    n_tiles = _tiles(n_size, nl.tile_size.gemm_moving_fmax)
    out = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n_index in _mine(len(n_tiles)):
        n0, n_len = n_tiles[n_index]
        moving = []
        for k0, k_len in k_tiles:
            block = nl.ndarray((k_len, n_len), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=block, src=rhs[k0:k0 + k_len, n0:n0 + n_len])
            moving.append(block)
        for m0, m_len in m_tiles:
            acc = nl.ndarray((m_len, n_len), dtype=nl.float32, buffer=nl.psum)
            for (k0, k_len), block in zip(k_tiles, moving, strict=True):
                stationary = nl.ndarray((k_len, m_len), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=stationary, src=lhsT[k0:k0 + k_len, m0:m0 + m_len])
                nisa.nc_matmul(dst=acc, stationary=stationary, moving=block)
            result = nl.ndarray((m_len, n_len), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result, src=acc)
            nisa.dma_copy(dst=out[m0:m0 + m_len, n0:n0 + n_len], src=result)
    return out


@nki.jit
def stream(engine_op, *inputs):
    """One pass over operands laid out as [tiles, P, F]: "activation" (ScalarE, first input) or
    "tensor" (VectorE, all inputs). Each tile is a contiguous block, so DMAs spread over queues."""
    first = inputs[0]
    tiles, partitions, free = first.shape
    out = nl.ndarray((tiles, partitions, free), dtype=first.dtype, buffer=nl.shared_hbm)
    for index in _mine(tiles):
        loaded = []
        for operand in inputs:
            tile = nl.ndarray((partitions, free), dtype=operand.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=operand[index])
            loaded.append(tile)
        result = nl.ndarray((partitions, free), dtype=first.dtype, buffer=nl.sbuf)
        if engine_op == "activation":
            nisa.activation(dst=result, op=nl.exp, data=loaded[0])
        elif len(loaded) == 1:
            nisa.tensor_scalar(dst=result, data=loaded[0], op0=nl.multiply, operand0=2.0)
        else:
            nisa.tensor_tensor(dst=result, data1=loaded[0], data2=loaded[1], op=nl.add)
            for other in loaded[2:]:
                nisa.tensor_tensor(dst=result, data1=result, data2=other, op=nl.add)
        nisa.dma_copy(dst=out[index], src=result)
    return out


@nki.jit
def rows(x, write_rows):
    """Reduce each row of x[R, C] (128 rows per tile); with `write_rows`, scale and write it back."""
    row_count, cols = x.shape
    shape = (row_count, cols) if write_rows else (row_count, 1)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    row_tiles = _tiles(row_count, nl.tile_size.pmax)
    for index in _mine(len(row_tiles)):
        r0, r_len = row_tiles[index]
        total = nl.ndarray((r_len, 1), dtype=nl.float32, buffer=nl.sbuf)
        pieces = []
        for c0, c_len in _tiles(cols, STREAM_FREE):
            data = nl.ndarray((r_len, c_len), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=data, src=x[r0:r0 + r_len, c0:c0 + c_len])
            part = nl.ndarray((r_len, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=part, op=nl.add, data=data, axis=1, keepdims=True)
            nisa.tensor_tensor(dst=total, data1=total, data2=part, op=nl.add) if pieces else \
                nisa.tensor_copy(dst=total, src=part)
            pieces.append((c0, c_len, data))
        if not write_rows:
            nisa.dma_copy(dst=out[r0:r0 + r_len, :], src=total)
            continue
        for c0, c_len, data in pieces:
            scaled = nl.ndarray((r_len, c_len), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=scaled, data=data, op0=nl.multiply, operand0=total)
            nisa.dma_copy(dst=out[r0:r0 + r_len, c0:c0 + c_len], src=scaled)
    return out


@nki.jit
def copy(src):
    """An HBM-to-HBM copy by DMA of src laid out as [tiles, P, F], one DMA per tile."""
    out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    for index in _mine(src.shape[0]):
        nisa.dma_copy(dst=out[index], src=src[index])
    return out


ATTENTION_KEYS = 512
"""Keys per block of the attention kernel: one PSUM bank of fp32 scores per 128 queries."""


def _scores(q_tile, kT_block, mask):
    """S = Q K^T for one query tile and key block, in PSUM; a diagonal block of a causal mask sets
    the keys after each query to -inf (GpSimd, which reads SBUF only)."""
    queries, keys = q_tile.shape[1], kT_block.shape[1]
    scores = nl.ndarray((queries, keys), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=scores, stationary=q_tile, moving=kT_block)
    if mask is None:
        return scores
    masked = nl.ndarray((queries, keys), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=masked, src=scores)
    nisa.affine_select(dst=masked, pattern=[[-1, keys]], channel_multiplier=1, on_true_tile=masked,
                       on_false_value=-3.0e38, cmp_op=nl.greater_equal, offset=mask)
    return masked


def _softmax_step(scores, state, dtype):
    """Online softmax: the new running max, P = exp(S - max) with its row sums, and the factor
    exp(old max - new max) that rescales what was accumulated so far. The state keeps the max
    negated, as the exps take it (their bias)."""
    _out, negated_max, row_sum = state
    queries, keys = scores.shape
    block_max = nl.ndarray((queries, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=block_max, op=nl.maximum, data=scores, axis=1, keepdims=True)
    new_max = nl.ndarray((queries, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=new_max, data=block_max, op0=nl.multiply, operand0=-1.0, op1=nl.minimum,
                              operand1=negated_max)
    probs = nl.ndarray((queries, keys), dtype=dtype, buffer=nl.sbuf)
    block_sum = nl.ndarray((queries, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=probs, op=nl.exp, data=scores, bias=new_max, reduce_op=nl.add, reduce_res=block_sum)
    correction = nl.ndarray((queries, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=correction, op=nl.exp, data=negated_max, bias=new_max, scale=-1.0)
    new_sum = nl.ndarray((queries, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=new_sum, data=row_sum, op0=nl.multiply, operand0=correction, op1=nl.add,
                              operand1=block_sum)
    return probs, correction, new_max, new_sum


def _values_step(all_probs, v_pieces):
    """P @ V in PSUM for each tile of a wave: every P transposed on TensorE in 128-key pieces, the
    pieces copied to SBUF (Vector and Scalar in turn), then the matmuls, each stage across the
    wave so the Tensor Engine never waits on the copy of the piece it just transposed."""
    queries, keys = all_probs[0].shape
    depth = v_pieces[0].shape[1]
    key_pieces = _tiles(keys, nl.tile_size.pmax)
    flipped = []
    for probs in all_probs:
        for k0, k_len in key_pieces:
            flipped.append(nl.ndarray((k_len, probs.shape[0]), dtype=nl.float32, buffer=nl.psum))
            nisa.nc_transpose(dst=flipped[-1], data=probs[:, k0:k0 + k_len], engine=nisa.tensor_engine)
    copied = []
    for index, piece in enumerate(flipped):
        copied.append(nl.ndarray(piece.shape, dtype=v_pieces[0].dtype, buffer=nl.sbuf))
        engine = (nisa.vector_engine, nisa.scalar_engine)[index % 2]
        nisa.tensor_copy(dst=copied[-1], src=piece, engine=engine)
    outputs = []
    for tile, probs in enumerate(all_probs):
        outputs.append(nl.ndarray((probs.shape[0], depth), dtype=nl.float32, buffer=nl.psum))
        for index, v_piece in enumerate(v_pieces):
            nisa.nc_matmul(dst=outputs[-1], stationary=copied[tile * len(v_pieces) + index], moving=v_piece,
                           accumulate=index > 0)
    return outputs


def _attention_wave(work, kT_block, v_pieces):
    """One key block for a wave of query tiles, stage by stage across the wave, so that while one
    tile waits on another engine the next tile's work of the same stage can run.
    `work` holds (query tile, state, mask); returns the new states."""
    scores = [_scores(q_tile, kT_block, mask) for q_tile, _state, mask in work]
    dtype = v_pieces[0].dtype
    steps = [_softmax_step(s, state, dtype) for s, (_q, state, _m) in zip(scores, work, strict=True)]
    outputs = _values_step([probs for probs, *_rest in steps], v_pieces)
    states = []
    for (_q, (out, _max, _sum), _m), (_p, correction, new_max, new_sum), block_out in zip(
            work, steps, outputs, strict=True):
        new_out = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=new_out, data=out, op0=nl.multiply, operand0=correction, op1=nl.add,
                                  operand1=block_out)
        states.append((new_out, new_max, new_sum))
    return states


def _load_keys_values(kT, v, kv):
    """Every key block of group `kv` (kT[D, 512] and V in 128-key pieces), loaded once into SBUF
    and kept for all the group's query tiles."""
    depth, kv_len = kT.shape[1], kT.shape[2]
    blocks = []
    for t0, t_size in _tiles(kv_len, ATTENTION_KEYS):
        kT_block = nl.ndarray((depth, t_size), dtype=kT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=kT_block, src=kT[kv, :, t0:t0 + t_size])
        v_pieces = []
        for p0, p_size in _tiles(t_size, nl.tile_size.pmax):
            v_pieces.append(nl.ndarray((p_size, depth), dtype=v.dtype, buffer=nl.sbuf))
            nisa.dma_copy(dst=v_pieces[-1], src=v[kv, t0 + p0:t0 + p0 + p_size, :])
        blocks.append((t0, t_size, kT_block, v_pieces))
    return blocks


ATTENTION_WAVE = 4
"""Query tiles whose online softmax advances together, block by block, so that each engine has
independent work while one tile's chain (matmul, max, exp, transpose, matmul) is in flight."""


def _start_query_tile(qT, group, q0, q_size):
    """A query tile in SBUF and its (output, running max, running sum) state."""
    depth = qT.shape[1]
    q_tile = nl.ndarray((depth, q_size), dtype=qT.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=q_tile, src=qT[group, :, q0:q0 + q_size])
    state = (nl.ndarray((q_size, depth), dtype=nl.float32, buffer=nl.sbuf),
             nl.ndarray((q_size, 1), dtype=nl.float32, buffer=nl.sbuf),
             nl.ndarray((q_size, 1), dtype=nl.float32, buffer=nl.sbuf))
    for tile, value in zip(state, (0.0, 3.0e38, 0.0), strict=True):  # output, -max, sum
        nisa.memset(dst=tile, value=value)
    return q_tile, state


@nki.jit
def attention(qT, kT, v, causal):
    """Flash attention forward: out[g] = softmax(q[g] @ k[g].T) @ v[g] for qT[G, D, S] (queries
    transposed, pre-scaled), kT[Gkv, D, T], v[Gkv, T, D]; query group g reads key group
    g // (G / Gkv). Queries are the last S of T positions; `causal` skips key blocks after them."""
    groups, depth, q_len = qT.shape
    kv_groups, kv_len = kT.shape[0], kT.shape[2]
    out = nl.ndarray((groups, q_len, depth), dtype=qT.dtype, buffer=nl.shared_hbm)
    shift = kv_len - q_len
    q_tiles = _tiles(q_len, nl.tile_size.pmax)
    for group in _mine(groups):
        blocks = _load_keys_values(kT, v, group // (groups // kv_groups))
        for first in range(0, len(q_tiles), ATTENTION_WAVE):
            wave = q_tiles[first:first + ATTENTION_WAVE]
            started = [_start_query_tile(qT, group, q0, q_size) for q0, q_size in wave]
            states = [state for _q, state in started]
            for t0, t_size, kT_block, v_pieces in blocks:
                active = [i for i, (q0, size) in enumerate(wave) if not causal or t0 <= shift + q0 + size - 1]
                if not active:
                    break
                work = [(started[i][0], states[i], shift + wave[i][0] - t0
                         if causal and t0 + t_size - 1 > shift + wave[i][0] else None) for i in active]
                for i, state in zip(active, _attention_wave(work, kT_block, v_pieces), strict=True):
                    states[i] = state
            for (q0, q_size), state in zip(wave, states, strict=True):
                result = nl.ndarray((q_size, depth), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=result, data=state[0], op0=nl.divide, operand0=state[2])
                nisa.dma_copy(dst=out[group, q0:q0 + q_size, :], src=result)
    return out
