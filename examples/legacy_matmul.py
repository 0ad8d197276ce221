"""A blocked matmul written in the old NKI API (`neuronxcc.nki`, SDK 2.26 style), run on trnsim.

The same blocking as `matmul_blocked` in matmul.py (the NKI 0.6 API): blocks of rhs and lhsT are
loaded into SBUF with index expressions, each [128, 512] output tile accumulates its K loop in
PSUM with `+=`, and rows go back to HBM. Both give the same bits.

    python examples/legacy_matmul.py

Importing this module turns the old-API aliases on (`trnsim.nki.compat.enable_legacy()`).
"""

import numpy as np

import trnsim.nki.compat

trnsim.nki.compat.enable_legacy()

import neuronxcc.nki as nki  # noqa: E402 - the old API, after the aliases are on
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402


@nki.jit(mode="simulation")
def legacy_matmul_blocked(lhsT, rhs):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N]; blocks of 16 x 128 rows of M and 2 x 512 columns of N."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    TILE_K, TILE_M = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    BLOCK_M, BLOCK_N = min(M, 16 * TILE_M), min(N, 2 * TILE_N)
    k_tiles = K // TILE_K
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    # [partition, K tile, column] views of a block: row k * 128 + p of the input
    i_p, i_k = nl.arange(TILE_K)[:, None, None], nl.arange(k_tiles)[None, :, None]
    i_n, i_m = nl.arange(BLOCK_N)[None, None, :], nl.arange(BLOCK_M)[None, None, :]
    i_row, i_col = nl.arange(TILE_M)[:, None], nl.arange(BLOCK_N)[None, :]
    for nb in nl.affine_range(N // BLOCK_N):
        rhs_block = nl.load(rhs[i_k * TILE_K + i_p, nb * BLOCK_N + i_n])
        for mb in nl.affine_range(M // BLOCK_M):
            lhs_block = nl.load(lhsT[i_k * TILE_K + i_p, mb * BLOCK_M + i_m])
            for m in nl.affine_range(BLOCK_M // TILE_M):
                row = nl.ndarray((nl.par_dim(TILE_M), BLOCK_N), dtype=out.dtype, buffer=nl.sbuf)
                for n in nl.affine_range(BLOCK_N // TILE_N):
                    acc = nl.ndarray((nl.par_dim(TILE_M), TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_tiles):
                        acc += nisa.nc_matmul(lhs_block[:, k, m * TILE_M:(m + 1) * TILE_M],
                                              rhs_block[:, k, n * TILE_N:(n + 1) * TILE_N])
                    row[:, n * TILE_N:(n + 1) * TILE_N] = acc
                nl.store(out[mb * BLOCK_M + m * TILE_M + i_row, nb * BLOCK_N + i_col], value=row)
    return out


def main(size=512):
    import ml_dtypes
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((size, size)).astype(ml_dtypes.bfloat16)
    result = legacy_matmul_blocked(lhsT, rhs).astype(np.float32)
    expected = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    error = float(np.abs(result - expected).max() / np.abs(expected).max())
    print(f"old-API blocked matmul {size}^3: max error {error:.2e} of the largest value")
    assert error < 2 ** -7
    return result


if __name__ == "__main__":
    main()
