"""The NKI matmul tutorial's four kernels, in trnsim's own words, and their predicted latency.

The SDK tutorial (SDK 2.20-2.26, "matrix_multiplication.rst") steps one matmul,
result[M, N] = lhsT[K, M].T @ rhs[K, N], through four versions and publishes what each took on
trn1 (reference nki.md §5). The kernels below follow the same steps:

1. `matmul_tiled`: for every 128 x 512 output tile, load both input tiles for each K step;
2. `matmul_hoisted`: load the lhsT column stripe once per M tile, the rhs stripe once per tile;
3. `matmul_blocked_mn`: reuse each loaded stripe for a 2 x 2 block of output tiles;
4. `matmul_blocked_mnk`: block M (2048), N (1024) and K (1024), keep partial sums in SBUF, and
   move data in wide (>= 2 KiB per partition) transfers.

Run it:  python examples/matmul_tutorial.py [--size small|tutorial] [--target trn1,trn2,trn3]
"""

from __future__ import annotations

import argparse
import sys

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.timing.profile import profile_trace

TILE_K = 128  # contraction rows per matmul: the partition count (nl.tile_size.pmax)
TILE_M = 128  # stationary free size (nl.tile_size.gemm_stationary_fmax)
TILE_N = 512  # moving free size: one PSUM bank of fp32 (nl.tile_size.gemm_moving_fmax)

PUBLISHED_MS = {"matmul_tiled": 51.80, "matmul_hoisted": 42.96, "matmul_blocked_mn": 22.07,
                "matmul_blocked_mnk": 6.97}
"""trn1 latencies for [4096,8192] @ [8192,8192] bf16 (reference nki.md §5, SDK-2.26 tutorial)."""


def _output_tile(result, psum, m: int, n: int) -> None:
    """PSUM -> SBUF (cast to the output dtype) -> HBM for one TILE_M x TILE_N result tile."""
    tile = nl.copy(psum, dtype=result.dtype)
    nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=tile)


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Step 1: every K step loads its own pair of tiles."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            psum = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                rhs_tile = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=psum, stationary=lhsT_tile, moving=rhs_tile)
            _output_tile(result, psum, m, n)
    return result


def _load_stripe(source, column: int, width: int, k_tiles: int, first_k_tile: int = 0):
    """k_tiles K-tiles (from `first_k_tile`) of the width-wide column stripe of `source` at
    `column`, as a list of SBUF tiles [TILE_K, width], one per K tile (as the tutorials keep them:
    the compiler places, and if it must spills, each on its own)."""
    stripe = []
    for k in range(k_tiles):
        row = (first_k_tile + k) * TILE_K
        tile = nl.ndarray((TILE_K, width), dtype=source.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=source[row:row + TILE_K, column:column + width])
        stripe.append(tile)
    return stripe


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """Step 2: the lhsT stripe is loaded once per M tile instead of once per output tile."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    k_tiles = K // TILE_K
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        lhsT_stripe = _load_stripe(lhsT, m * TILE_M, TILE_M, k_tiles)
        for n in nl.affine_range(N // TILE_N):
            rhs_stripe = _load_stripe(rhs, n * TILE_N, TILE_N, k_tiles)
            psum = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                nisa.nc_matmul(dst=psum, stationary=lhsT_stripe[k], moving=rhs_stripe[k])
            _output_tile(result, psum, m, n)
            del rhs_stripe  # free the stripe before the next one is allocated (no fragmentation)
    return result


@nki.jit
def matmul_blocked_mn(lhsT, rhs, tiles_m: int = 2, tiles_n: int = 2):
    """Step 3: each loaded stripe serves a tiles_m x tiles_n block of output tiles."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    k_tiles = K // TILE_K
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (TILE_M * tiles_m)):
        lhsT_stripes = [_load_stripe(lhsT, (m * tiles_m + bm) * TILE_M, TILE_M, k_tiles)
                        for bm in range(tiles_m)]
        for n in nl.affine_range(N // (TILE_N * tiles_n)):
            rhs_stripes = [_load_stripe(rhs, (n * tiles_n + bn) * TILE_N, TILE_N, k_tiles)
                           for bn in range(tiles_n)]
            for bm in nl.affine_range(tiles_m):
                for bn in nl.affine_range(tiles_n):
                    psum = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_tiles):
                        nisa.nc_matmul(dst=psum, stationary=lhsT_stripes[bm][k], moving=rhs_stripes[bn][k])
                    _output_tile(result, psum, m * tiles_m + bm, n * tiles_n + bn)
            del rhs_stripes
    return result


@nki.jit
def matmul_blocked_mnk(lhsT, rhs, tiles_m: int = 16, tiles_n: int = 2, tiles_k: int = 8):
    """Step 4: block all three dimensions; partial sums of a K block accumulate in SBUF."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    block_m, block_n, block_k = TILE_M * tiles_m, TILE_N * tiles_n, TILE_K * tiles_k
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // block_n):
        sums = nl.zeros((TILE_M, M // block_m, tiles_m, tiles_n, TILE_N), dtype=lhsT.dtype,
                        buffer=nl.sbuf)
        for k in nl.sequential_range(K // block_k):
            rhs_block = _load_stripe(rhs, n * block_n, block_n, tiles_k, first_k_tile=k * tiles_k)
            for m in nl.affine_range(M // block_m):
                lhsT_block = _load_stripe(lhsT, m * block_m, block_m, tiles_k, first_k_tile=k * tiles_k)
                _multiply_block(sums, lhsT_block, rhs_block, m, tiles_m, tiles_n, tiles_k)
        _store_block_row(result, sums, n, block_m, block_n, tiles_m, tiles_n)
    return result


def _multiply_block(sums, lhsT_block, rhs_block, m, tiles_m, tiles_n, tiles_k) -> None:
    """All output tiles of one (M, N) block for one K block, added into the SBUF partial sums."""
    for bn in nl.affine_range(tiles_n):
        for bm in nl.affine_range(tiles_m):
            psum = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for bk in nl.affine_range(tiles_k):
                nisa.nc_matmul(dst=psum,
                               stationary=lhsT_block[bk][:, bm * TILE_M:(bm + 1) * TILE_M],
                               moving=rhs_block[bk][:, bn * TILE_N:(bn + 1) * TILE_N])
            partial = sums[:, m, bm, bn, :]
            nisa.tensor_tensor(dst=partial, data1=partial, data2=psum, op=nl.add)


def _store_block_row(result, sums, n, block_m, block_n, tiles_m, tiles_n) -> None:
    """Pack each row of output tiles into one wide SBUF tile and store it in one transfer."""
    for m in nl.affine_range(sums.shape[1]):
        for bm in nl.affine_range(tiles_m):
            packed = nl.ndarray((TILE_M, block_n), dtype=result.dtype, buffer=nl.sbuf)
            for bn in nl.affine_range(tiles_n):
                nisa.tensor_copy(dst=packed[:, bn * TILE_N:(bn + 1) * TILE_N],
                                 src=sums[:, m, bm, bn, :])
            row = m * block_m + bm * TILE_M
            nl.store(result[row:row + TILE_M, n * block_n:(n + 1) * block_n], value=packed)


KERNELS = (matmul_tiled, matmul_hoisted, matmul_blocked_mn, matmul_blocked_mnk)
SIZES = {"tutorial": (4096, 8192, 8192), "small": (2048, 1024, 2048)}
"""(M, K, N); "small" keeps every blocking factor of step 4 whole."""


def traces(size: str = "tutorial", kernels=KERNELS, target: str = "trn1") -> dict:
    """Trace-only runs (shapes, no values) of the tutorial kernels: name -> Trace."""
    M, K, N = SIZES[size]
    lhsT, rhs = nki.TensorSpec((K, M), "bfloat16"), nki.TensorSpec((K, N), "bfloat16")
    return {kernel.__name__: nki.trace(kernel, lhsT, rhs, target=target) for kernel in kernels}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tutorial")
    parser.add_argument("--target", default="trn1", help="comma-separated, e.g. trn1,trn2,trn3")
    args = parser.parse_args(argv)
    targets = args.target.split(",")
    print(f"{'kernel':<20}{'target':<8}{'instructions':>13}{'predicted ms':>14}{'published ms':>14}")
    for name, trace in traces(args.size).items():
        for target, (_, summary) in profile_trace(trace, targets).items():
            published = PUBLISHED_MS[name] if target == "trn1" and args.size == "tutorial" else None
            shown = f"{published:.2f}" if published else "-"
            print(f"{name:<20}{target:<8}{summary.instructions:>13}"
                  f"{summary.latency_s * 1e3:>14.2f}{shown:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
