"""Eager, deferred, strict and LNC=2 runs of a kernel give bitwise identical results.

Deferred execution runs independent matmul chains side by side (core/deferred.py), but every
matmul is the same one-thread BLAS call in every mode, so the comparison is of bytes: no
tolerance. Random matmul chains (tile sizes, operand dtypes, chain orders, accumulate flags,
grids of output tiles), kernels mixing matmuls with vector work, and the examples."""

import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim
import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))

import flash_attention  # noqa: E402
import matmul  # noqa: E402
import matmul_tutorial  # noqa: E402
import norms  # noqa: E402
import selective_scan  # noqa: E402
import softmax  # noqa: E402

MODES = {"deferred": {"eager": False, "strict": False}, "eager": {"eager": True, "strict": False},
         "strict": {"eager": False, "strict": True}}


def run_in_every_mode(kernel, *args, lnc2: bool = False) -> dict[str, np.ndarray]:
    """The kernel's result in each mode (and as two LNC=2 cores, for kernels that split their work
    by program id)."""
    results = {}
    for mode, settings in MODES.items():
        with trnsim.config.override(**settings):
            results[mode] = np.asarray(nki.simulate(kernel, target="trn2")(*args))
    if lnc2:
        with trnsim.config.override(**MODES["deferred"]):
            results["lnc2"] = np.asarray(nki.simulate(kernel[2], target="trn2")(*args))
    return results


def assert_same_bits(results: dict[str, np.ndarray]) -> None:
    first = results["deferred"]
    for mode, values in results.items():
        assert values.dtype == first.dtype and values.shape == first.shape, mode
        assert np.ascontiguousarray(values).tobytes() == np.ascontiguousarray(first).tobytes(), (
            f"{mode}: {np.mean(values != first):.1%} of the values differ from the deferred run")


@nki.jit
def matmul_grid(lhsT, rhs, tile_m, tile_n, k_outer, flags):
    """out = lhsT.T @ rhs through a grid of [tile_m, tile_n] PSUM tiles, one K chain each.

    k_outer: the K loop outside the tile loop (the chains interleave). flags: the first matmul
    of a chain passes accumulate=False and the rest accumulate=True (else NKI's default). Output
    tiles are dealt out to the programs of the launch, so an LNC=2 launch splits the grid."""
    contraction, size_m = lhsT.shape
    size_n = rhs.shape[1]
    tile_k = min(contraction, 128)
    k_tiles = contraction // tile_k
    out = nl.ndarray((size_m, size_n), dtype=nl.float32, buffer=nl.shared_hbm)
    left = nl.ndarray((tile_k, k_tiles, size_m), dtype=lhsT.dtype, buffer=nl.sbuf)
    right = nl.ndarray((tile_k, k_tiles, size_n), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=lhsT.reshape((k_tiles, tile_k, size_m)).permute((1, 0, 2)))
    nisa.dma_copy(dst=right, src=rhs.reshape((k_tiles, tile_k, size_n)).permute((1, 0, 2)))
    tiles = [(m, n) for m in range(size_m // tile_m) for n in range(size_n // tile_n)]
    mine = tiles[nl.program_id(0)::nl.num_programs(0)]
    sums = {tile: nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum) for tile in mine}
    steps = [(k, tile) for k in range(k_tiles) for tile in mine] if k_outer else \
        [(k, tile) for tile in mine for k in range(k_tiles)]
    for k, (m, n) in steps:
        accumulate = (k > 0) if flags else None
        nisa.nc_matmul(dst=sums[(m, n)], stationary=left[:, k, m * tile_m:(m + 1) * tile_m],
                       moving=right[:, k, n * tile_n:(n + 1) * tile_n], accumulate=accumulate)
    for m, n in mine:
        tile = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tile, src=sums[(m, n)])
        nisa.dma_copy(dst=out[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], src=tile)
    return out


def _random_case(seed: int):
    """Operands and tiling for one random grid of matmul chains."""
    rng = np.random.default_rng(seed)
    dtype = [np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3][seed % 3]
    tile_k = int(rng.choice([32, 96, 128]))
    k_tiles = int(rng.integers(1, 4)) if tile_k == 128 else 1
    tile_m, tile_n = int(rng.choice([32, 64, 128])), int(rng.choice([64, 200, 512]))
    m_tiles, n_tiles = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    scale = rng.uniform(0.01, 10.0)  # spread the exponents a little (fp8 e4m3 stays under its 240)
    lhsT = (rng.standard_normal((tile_k * k_tiles, tile_m * m_tiles)) * scale).astype(dtype)
    rhs = rng.standard_normal((tile_k * k_tiles, tile_n * n_tiles)).astype(dtype)
    return lhsT, rhs, tile_m, tile_n, bool(rng.integers(2)), bool(seed % 4 == 3)


@pytest.mark.parametrize("seed", range(12))
def test_random_matmul_grids_give_the_same_bits_in_every_mode(seed):
    lhsT, rhs, *tiling = _random_case(seed)
    results = run_in_every_mode(matmul_grid, lhsT, rhs, *tiling, lnc2=True)
    assert_same_bits(results)
    expected = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(results["deferred"], expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_a_grid_of_chains_runs_on_workers_with_the_bits_of_eager_execution(on_workers):
    """The case the one-GEMM-per-grid path got wrong: 2 x 2 tiles of 128 x 512, 3 K steps
    (before, 7% to 30% of the sums differed from eager ones in the last bits)."""
    rng = np.random.default_rng(1)
    lhsT, rhs = (rng.standard_normal((384, width)).astype(np.float32) for width in (256, 1024))
    results = run_in_every_mode(matmul_grid, lhsT, rhs, 128, 512, False, False, lnc2=True)
    assert len(on_workers) == 12  # deferred: four chains of three matmuls ran on workers
    assert_same_bits(results)


@nki.jit
def matmul_then_vector(lhsT, rhs, gate):
    """Two matmul stages joined by vector work on PSUM and SBUF: scale the first product, use it
    as the next stationary, add a gate, and keep accumulating one PSUM tile across the vector op."""
    size_k, size_m = lhsT.shape
    out = nl.ndarray((size_m, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b, g = nl.load(lhsT), nl.load(rhs), nl.load(gate)
    first = nl.ndarray((size_m, size_m), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=first, stationary=a, moving=a)
    second = nl.ndarray((size_m, rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=second, stationary=a, moving=b)
    scaled = nl.ndarray((size_m, size_m), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.activation(dst=scaled, op=nl.tanh, data=first, scale=0.01)
    nisa.nc_matmul(dst=second, stationary=scaled, moving=nl.load(rhs[0:size_m, :]))  # still adding
    gated = nl.ndarray((size_m, rhs.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=gated, data1=second, data2=g, op=nl.multiply)
    third = nl.ndarray((size_m, rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=third, stationary=a, moving=b)
    nisa.tensor_tensor(dst=gated, data1=gated, data2=third, op=nl.add)
    nl.store(out, gated)
    return out


def test_matmuls_mixed_with_vector_work_give_the_same_bits_in_every_mode():
    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    gate = rng.uniform(0, 1, (128, 512)).astype(np.float32)
    assert_same_bits(run_in_every_mode(matmul_then_vector, lhsT, rhs, gate))


RNG = np.random.default_rng(11)


def bf16(*shape):
    return RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


EXAMPLES = [
    (matmul.matmul_tiled, (bf16(256, 256), bf16(256, 1024))),
    (matmul.matmul_blocked, (bf16(384, 512), bf16(384, 1024))),
    (matmul_tutorial.matmul_hoisted, (bf16(256, 256), bf16(256, 1024))),
    (matmul_tutorial.matmul_blocked_mn, (bf16(256, 256), bf16(256, 1024))),
    (matmul_tutorial.matmul_blocked_mnk, (bf16(512, 512), bf16(512, 1024), 2, 1, 2)),  # 2 blocks of M, N, K
    (flash_attention.flash_attention_causal, (bf16(256, 64), bf16(256, 64), bf16(256, 64))),
    (softmax.softmax_rows, (f32(200, 64),)),
    (norms.rmsnorm, (f32(128, 256), f32(256))),
    (norms.layernorm, (f32(128, 256), f32(256), f32(256))),
    (selective_scan.selective_scan, (f32(128, 32), np.abs(f32(128, 32)) * 0.1 + 0.01,
                                     -np.abs(f32(128, 4)) - 0.5, f32(4, 32), f32(4, 32))),
]


@pytest.mark.parametrize("kernel,args", EXAMPLES, ids=[kernel.fn.__name__ for kernel, _ in EXAMPLES])
def test_the_examples_give_the_same_bits_in_every_mode(kernel, args):
    assert_same_bits(run_in_every_mode(kernel, *args))
