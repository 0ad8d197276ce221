"""Matrix multiplication kernels in NKI style: a plain tiled version and a blocked version.

Both compute out[M, N] = lhsT[K, M].T @ rhs[K, N] with bf16 inputs and fp32 accumulation in PSUM.
The blocked kernel keeps a block of each operand in SBUF and reuses it across many matmul
instructions, the way fast NKI matmuls cut HBM traffic.

    python examples/matmul.py          # runs both on random data and compares with numpy
"""

import numpy as np

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


@nki.jit
def matmul_tiled(lhsT, rhs):
    """One PSUM tile per output tile; every K step reloads its operands from HBM."""
    K, M = lhsT.shape
    _, N = rhs.shape
    tile_k, tile_m = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax
    tile_n = nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // tile_m):
        for n in nl.affine_range(N // tile_n):
            acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // tile_k):
                a = nl.ndarray((tile_k, tile_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((tile_k, tile_n), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * tile_k:(k + 1) * tile_k, m * tile_m:(m + 1) * tile_m])
                nisa.dma_copy(dst=b, src=rhs[k * tile_k:(k + 1) * tile_k, n * tile_n:(n + 1) * tile_n])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            result = nl.ndarray((tile_m, tile_n), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result, src=acc)
            nisa.dma_copy(dst=out[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], src=result)
    return out


@nki.jit
def matmul_blocked(lhsT, rhs, block_m_tiles=16, block_n_tiles=2):
    """Blocks of M and N stay in SBUF ([128, K/128, block] layout); K is walked inside."""
    K, M = lhsT.shape
    _, N = rhs.shape
    tile_k, tile_m = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax
    tile_n = nl.tile_size.gemm_moving_fmax
    k_tiles = K // tile_k
    block_m = min(M, block_m_tiles * tile_m)
    block_n = min(N, block_n_tiles * tile_n)
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // block_n):
        rhs_block = nl.ndarray((tile_k, k_tiles, block_n), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rhs_block,
                      src=rhs[:, nb * block_n:(nb + 1) * block_n].reshape((k_tiles, tile_k, block_n))
                      .permute((1, 0, 2)))
        for mb in nl.affine_range(M // block_m):
            lhs_block = nl.ndarray((tile_k, k_tiles, block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=lhs_block,
                          src=lhsT[:, mb * block_m:(mb + 1) * block_m].reshape((k_tiles, tile_k, block_m))
                          .permute((1, 0, 2)))
            for m in nl.affine_range(block_m // tile_m):
                row = nl.ndarray((tile_m, block_n), dtype=out.dtype, buffer=nl.sbuf)
                for n in nl.affine_range(block_n // tile_n):
                    acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_tiles):
                        nisa.nc_matmul(dst=acc, stationary=lhs_block[:, k, m * tile_m:(m + 1) * tile_m],
                                       moving=rhs_block[:, k, n * tile_n:(n + 1) * tile_n])
                    nisa.tensor_copy(dst=row[:, n * tile_n:(n + 1) * tile_n], src=acc)
                rows = slice(mb * block_m + m * tile_m, mb * block_m + (m + 1) * tile_m)
                nisa.dma_copy(dst=out[rows, nb * block_n:(nb + 1) * block_n], src=row)
    return out


def reference(lhsT, rhs):
    """fp32 numpy product of the same bf16 inputs."""
    return lhsT.astype(np.float32).T @ rhs.astype(np.float32)


def main(size=512):
    import ml_dtypes
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    expected = reference(lhsT, rhs)
    for kernel in (matmul_tiled, matmul_blocked):
        result = nki.simulate(kernel)(lhsT, rhs).astype(np.float32)
        error = np.abs(result - expected).max() / np.abs(expected).max()
        print(f"{kernel.__name__}: {len(kernel.last_trace)} instructions, max relative error {error:.2e}")


if __name__ == "__main__":
    main()
