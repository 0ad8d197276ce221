"""The examples match numpy references (bf16 inputs: tolerances relative to the output scale)."""

import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim.nki as nki

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))

import flash_attention  # noqa: E402
import matmul  # noqa: E402
import norms  # noqa: E402
import selective_scan  # noqa: E402
import softmax  # noqa: E402

RNG = np.random.default_rng(5)
BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("kernel", [matmul.matmul_tiled, matmul.matmul_blocked])
def test_matmul_kernels_bf16(kernel):
    lhsT = RNG.standard_normal((256, 384)).astype(BF16)
    rhs = RNG.standard_normal((256, 1024)).astype(BF16)
    result = nki.simulate(kernel, target="trn2")(lhsT, rhs).astype(np.float32)
    expected = matmul.reference(lhsT, rhs)
    # fp32 accumulation, one bf16 rounding of the output: relative error <= 2^-8
    np.testing.assert_allclose(result, expected, rtol=2 ** -8, atol=2 ** -8 * np.abs(expected).max() * 0.05)


def test_softmax_handles_a_partial_last_tile():
    x = RNG.standard_normal((200, 256)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(softmax.softmax_rows)(x), softmax.reference(x), rtol=1e-5,
                               atol=1e-7)


def test_rmsnorm_and_layernorm():
    x = RNG.standard_normal((256, 640)).astype(np.float32)
    w, b = RNG.standard_normal(640).astype(np.float32), RNG.standard_normal(640).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(norms.rmsnorm)(x, w), norms.rmsnorm_reference(x, w), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(nki.simulate(norms.layernorm)(x, w, b), norms.layernorm_reference(x, w, b),
                               rtol=1e-4, atol=1e-4)


def test_causal_flash_attention_bf16():
    q, k, v = (RNG.standard_normal((384, 64)).astype(BF16) for _ in range(3))
    result = nki.simulate(flash_attention.flash_attention_causal)(q, k, v).astype(np.float32)
    # bf16 probabilities and output: absolute error within 2% of the value scale
    np.testing.assert_allclose(result, flash_attention.reference(q, k, v), atol=0.02)
    assert np.isfinite(result).all()


def test_selective_scan():
    x = RNG.standard_normal((128, 96)).astype(np.float32)
    delta = RNG.uniform(0.01, 0.1, (128, 96)).astype(np.float32)
    A = -RNG.uniform(0.5, 2.0, (128, 4)).astype(np.float32)
    B, C = (RNG.standard_normal((4, 96)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(nki.simulate(selective_scan.selective_scan)(x, delta, A, B, C),
                               selective_scan.reference(x, delta, A, B, C), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel,args", [
    (matmul.matmul_blocked, [((256, 256), "bfloat16"), ((256, 1024), "bfloat16")]),
    (softmax.softmax_rows, [((200, 64), "float32")]),
    (norms.layernorm, [((128, 640), "float32"), ((640,), "float32"), ((640,), "float32")]),
    (flash_attention.flash_attention_causal, [((256, 64), "bfloat16")] * 3),
])
def test_trace_only_gives_the_same_trace_as_simulate(kernel, args):
    specs = [nki.TensorSpec(shape, dtype) for shape, dtype in args]
    arrays = [RNG.standard_normal(shape).astype(BF16 if dtype == "bfloat16" else np.float32)
              for shape, dtype in args]
    nki.simulate(kernel, target="trn2")(*arrays)
    simulated = kernel.last_trace
    traced = nki.trace(kernel, *specs, target="trn2")
    assert len(traced) == len(simulated) > 0
    assert traced == simulated


def test_run_all_reports_every_example_within_tolerance(capsys):
    import run_all
    assert run_all.main(["--target", "trn3"]) == 0
    out = capsys.readouterr().out
    names = [case[0] for case in run_all.cases(np.random.default_rng(0))]
    assert len(names) == 7 and all(name in out for name in names)
    assert out.count("yes") == 7 and "NO" not in out


def test_the_tour_checks_the_kernels_and_prices_a_training_loop(capsys):
    """examples/tour.py is the README's main job."""
    import tour
    assert tour.main() == 0
    out = capsys.readouterr().out
    assert "final loss on neuron" in out and "trn1" in out and "trn2" in out and "$" in out
