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
