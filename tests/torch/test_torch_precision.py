"""Precision as on Trainium: bf16 matmuls accumulate in fp32; fp32 -> bf16 casts round to nearest
even, or stochastically under NEURON_RT_STOCHASTIC_ROUNDING_EN=1 (seeded by ..._SEED)."""

import re

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from trnsim import numerics


def test_bf16_matmul_accumulates_in_fp32_and_rounds_once():
    # 4096 products of 1 + 2^-8: a bf16 running sum stalls long before the end, fp32 does not.
    a = torch.full((1, 4096), 1 + 2**-7, dtype=torch.bfloat16)
    b = torch.full((4096, 1), 1 + 2**-7, dtype=torch.bfloat16)
    exact = (a.float() @ b.float()).to(torch.bfloat16)
    got = (a.to("neuron") @ b.to("neuron")).cpu()
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, exact)
    chained = torch.zeros((), dtype=torch.bfloat16)
    for _ in range(4096):
        chained = chained + a[0, 0] * b[0, 0]
    assert chained.item() != got.item()


def test_bf16_linear_and_conv_match_an_fp32_computation_rounded_once():
    torch.manual_seed(0)
    x, w, bias = torch.randn(8, 64), torch.randn(32, 64), torch.randn(32)
    low = [t.to(torch.bfloat16) for t in (x, w, bias)]
    expected = torch.nn.functional.linear(*[t.float() for t in low]).to(torch.bfloat16)
    got = torch.nn.functional.linear(*[t.to("neuron") for t in low]).cpu()
    assert torch.equal(got, expected)
    image, kernel = torch.randn(1, 3, 8, 8).to(torch.bfloat16), torch.randn(4, 3, 3, 3).to(torch.bfloat16)
    expected = torch.nn.functional.conv2d(image.float(), kernel.float()).to(torch.bfloat16)
    assert torch.equal(torch.nn.functional.conv2d(image.to("neuron"), kernel.to("neuron")).cpu(), expected)


MIXED_DTYPE_MATMULS = {
    "mm": lambda a, b: torch.mm(a, b.T),
    "addmm": lambda a, b: torch.addmm(a[0, :3].float(), b, b.T),
    "bmm": lambda a, b: torch.bmm(a[None], b.T[None]),
    "linear": lambda a, b: F.linear(a, b),
    "conv1d": lambda a, b: F.conv1d(a[None], b[:, :, None]),
}


@pytest.mark.parametrize("low", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("op", MIXED_DTYPE_MATMULS, ids=list(MIXED_DTYPE_MATMULS))
def test_matmuls_of_mixed_dtypes_are_refused_as_on_cpu(op, low):
    """A bf16 operand was widened before the dtype check: fp32 x bf16 returned a bf16 result, and
    bf16 x fp16 named float in its error."""
    torch.manual_seed(0)
    a, b = torch.randn(3, 3).to(low), torch.randn(3, 3).to(torch.bfloat16)
    with pytest.raises(RuntimeError) as on_cpu:
        MIXED_DTYPE_MATMULS[op](a, b)
    with pytest.raises(type(on_cpu.value), match=re.escape(str(on_cpu.value).splitlines()[0])):
        MIXED_DTYPE_MATMULS[op](a.to("neuron"), b.to("neuron"))


def test_nearest_rounding_is_the_default_and_matches_numerics(monkeypatch):
    monkeypatch.delenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", raising=False)
    x = torch.randn(1000) * 10
    got = x.to("neuron").to(torch.bfloat16).cpu()
    expected = numerics.cast(x.numpy(), "bfloat16", rounding="nearest")
    assert np.array_equal(got.view(torch.int16).numpy(), expected.view(np.int16))


def test_stochastic_rounding_is_unbiased_and_seeded_by_neuron_variables(monkeypatch):
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
    lo, hi = 1.0, 1.0 + 2**-7
    value = lo + 0.3 * (hi - lo)  # rounds up with probability 0.3
    samples = 200_000
    with numerics.stochastic_seed(7):
        rounded = torch.full((samples,), value, device="neuron").to(torch.bfloat16).cpu().float()
    assert set(rounded.unique().tolist()) == {lo, hi}
    share_up = (rounded == hi).float().mean().item()
    z = (share_up - 0.3) / np.sqrt(0.3 * 0.7 / samples)
    assert abs(z) < 5, z
    with numerics.stochastic_seed(7):
        again = torch.full((samples,), value, device="neuron").to(torch.bfloat16).cpu().float()
    assert torch.equal(again, rounded)
    # The same switch applies to casts on the way in, and to matmul outputs in bf16.
    with numerics.stochastic_seed(1):
        moved = torch.full((samples,), value).to("neuron", torch.bfloat16).cpu().float()
    assert set(moved.unique().tolist()) == {lo, hi}


def test_stochastic_rounding_switch_rejects_bad_values(monkeypatch):
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "maybe")
    with pytest.raises(ValueError, match="NEURON_RT_STOCHASTIC_ROUNDING_EN"):
        torch.ones(2, device="neuron").to(torch.bfloat16)


def test_compiled_graphs_round_stochastically_when_they_run(monkeypatch):
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
    lo, hi = 1.0, 1.0 + 2**-7
    x = torch.full((20_000,), lo + 0.25 * (hi - lo), device="neuron")
    cast = torch.compile(lambda t: t.to(torch.bfloat16) * 1, backend="neuron")
    with numerics.stochastic_seed(3):
        rounded = cast(x).cpu().float()
    assert set(rounded.unique().tolist()) == {lo, hi}
    assert abs((rounded == hi).float().mean().item() - 0.25) < 0.02


def test_binary_cross_entropy_is_refused_under_autocast_as_on_cuda():
    """It raised a raw 'Found dtype Float but expected BFloat16' from inside PyTorch."""
    import trnsim
    x = torch.randn(4, 3, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        probabilities = torch.sigmoid(torch.nn.functional.linear(x, torch.randn(2, 3, device="neuron")))
        with pytest.raises(trnsim.UnsupportedError, match="binary_cross_entropy_with_logits"):
            torch.nn.functional.binary_cross_entropy(probabilities, torch.rand(4, 2, device="neuron"))


def _autocast_registrations(key: str) -> set[str]:
    names = torch._C._dispatch_get_all_op_names()
    return {name for name in names if name.startswith("aten::")
            and torch._C._dispatch_has_kernel_for_dispatch_key(name, key)}


def test_autocast_casts_exactly_the_ops_cuda_autocast_casts():
    """sum, cumsum, prod, norms and native_layer_norm stayed bf16; dot, index_put, scatter_add
    (CUDA's promote list) were missing; linalg_vecdot and lstm_cell were not cast down."""
    assert _autocast_registrations("AutocastPrivateUse1") == _autocast_registrations("AutocastCUDA")


def test_autocast_policies_match_cudas():
    x = torch.randn(4, 4, device="neuron")
    low = x.bfloat16()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        fp32 = [low.sum(), low.cumsum(0), low.prod(), torch.linalg.vector_norm(low), torch.norm(low),
                torch.ops.aten.norm.Scalar(low), torch.native_layer_norm(low, (4,), None, None, 1e-5)[0]]
        assert all(t.dtype == torch.float32 for t in fp32)
        assert torch.softmax(x, -1, dtype=torch.bfloat16).dtype == torch.bfloat16  # a given dtype holds
        assert torch.dot(x[0], low[0]).dtype == torch.float32  # promoted to the widest
        assert torch.dot(low[0], low[1]).dtype == torch.bfloat16
        index = torch.zeros(1, 4, dtype=torch.long, device="neuron")
        assert x.scatter_add(0, index, low[:1]).dtype == torch.float32
        assert torch.linalg.vecdot(x, x).dtype == torch.bfloat16
        assert torch.ops.aten.norm.Scalar(x.double()).dtype == torch.float64  # float64 is not cast
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType"):  # CUDA's error, not bf16
            torch.dot(x.half()[0], low[0])
