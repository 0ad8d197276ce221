"""Public NKI 0.6 kernels, unmodified, against numpy references written here.

Run with TRNSIM_PUBLISHED_KERNELS=/tmp/kernels, a directory holding an export of each repository
below at the listed commit (`git --git-dir=<mirror> archive <commit> | tar -x -C /tmp/kernels/<repo>`).
The kernels' own references are never used: each test builds small inputs and its own answer.
docs/published-kernels.md records every kernel run and the result.
"""

import ml_dtypes
import numpy as np
import pytest
from kernel_sources import ENV_VAR, published_root

import trnsim.nki as tnki
from trnsim import hardware, system
from trnsim.errors import ArgumentError, ConfigError, TrnsimError, UnsupportedError

if published_root() is None:
    pytest.skip(f"published NKI kernels not available: set {ENV_VAR} to a directory with the repositories "
                "(see docs/published-kernels.md)", allow_module_level=True)

pytestmark = pytest.mark.kernels

COMMITS = {
    "aws-neuron-sdk": "81ce03ae261e12925e53437a0f690478e6366155",
    "nki-samples": "6905a68a122f937e68403727759f035ddd144f95",
    "nki-library": "d2ad3a579498d1888aa8740af97fd325dd5f2740",
    "nki-moe": "f7424185862cdff8d8fe60fa707816363af19df8",
}
"""The commit of each repository the kernels below were taken from."""

SDK_EXAMPLES = "nki/examples"
SAMPLES_TUTORIALS = "src/nki_samples/tutorials"
NKILIB = "src/nkilib_src/nkilib"

rng = np.random.default_rng(0)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def simulate(kernel, *args, target="trn2", **kwargs):
    return tnki.simulate(kernel, target=target)(*args, **kwargs)


# --- aws-neuron-sdk nki/examples -----------------------------------------------------------------

def test_sdk_simulate_quick_start(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/simulate/nki_simulate_example.py")
    a, b = normal(128, 512), normal(128, 512)
    np.testing.assert_array_equal(simulate(module.add_kernel, a, b), a + b)


def test_sdk_getting_started_baremetal(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/getting_started_baremetal.py")
    a, b = normal(4, 3, dtype=np.float16), normal(4, 3, dtype=np.float16)
    np.testing.assert_array_equal(simulate(module.nki_tensor_add_kernel, a, b), a + b)



def test_sdk_getting_started_torch(kernels):
    """Called directly with torch tensors, as the example does on a device: a torch tensor comes back."""
    import torch
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/getting_started_torch.py")
    a, b = torch.randn(4, 3, dtype=torch.float16), torch.randn(4, 3, dtype=torch.float16)
    result = module.nki_tensor_add_kernel(a, b)
    assert isinstance(result, torch.Tensor)
    torch.testing.assert_close(result, a + b, rtol=0, atol=0)

def test_sdk_tensor_addition(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/tensor_addition/tensor_addition_nki_kernels.py")
    a, b = normal(256, 1024), normal(256, 1024)
    np.testing.assert_array_equal(simulate(module.nki_tensor_add, a, b, target="trn1"), a + b)


def test_sdk_average_pool2d(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/average_pool2d/average_pool2d_nki_kernels.py")
    x = normal(8, 12, 12)
    expected = x.reshape(8, 4, 3, 4, 3).mean(axis=(2, 4))
    np.testing.assert_allclose(simulate(module.tensor_avgpool_kernel, x, 3), expected, rtol=1e-5, atol=1e-6)


def test_sdk_maxpool_access_pattern(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/index-case-3.py")
    x = normal(2, 6, 6)
    expected = x.reshape(2, 3, 2, 3, 2).max(axis=(2, 4))
    np.testing.assert_array_equal(simulate(module.tensor_maxpool_kernel_, x, 2), expected)


def test_sdk_split_even_odd_columns(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/index-case-1.py")
    x = normal(4, 5)
    even, odd = simulate(module.tensor_split_kernel_, x)
    np.testing.assert_array_equal(even, x[:, 0::2])
    np.testing.assert_array_equal(odd, x[:, 1::2])


def test_sdk_exp_one_tile(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/layout-pass.py")
    x = normal(128, 512)
    np.testing.assert_allclose(simulate(module.tensor_exp_kernel_, x), np.exp(x), rtol=1e-5)


def test_sdk_transpose2d(kernels):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/transpose2d/transpose2d_nki_kernels.py")
    x = normal(16, 3 * 4)
    expected = x.reshape(16, 3, 4).transpose(0, 2, 1).reshape(16, 12)
    np.testing.assert_array_equal(simulate(module.tensor_transpose2D_kernel_, x, (3, 4)), expected)


MATMUL_SDK = f"{SDK_EXAMPLES}/matrix_multiplication/matrix_multiplication_nki_kernels.py"
MATMUL_SAMPLES = f"{SAMPLES_TUTORIALS}/matrix_multiplication/matrix_multiplication_nki_kernels.py"
MATMUL_SHAPES = {  # kernel: K, M, N, meta-parameters
    "nki_matmul_basic_": (128, 64, 512, {}),
    "nki_matmul_tiled_": (256, 256, 1024, {}),
    "nki_matmul_hoist_load_": (256, 256, 1024, {}),
    "nki_matmul_block_free_dimension_": (256, 256, 1024, {}),
    "nki_matmul_fully_optimized_": (256, 256, 1024, {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 1,
                                                     "TILES_IN_BLOCK_K": 2}),
}
MATMUL_SAMPLES_REFUSED = ["nki_matmul_basic_", "nki_matmul_tiled_", "nki_matmul_hoist_load_"]
MATMUL_CASES = ([("aws-neuron-sdk", MATMUL_SDK, name) for name in MATMUL_SHAPES]
                + [("nki-samples", MATMUL_SAMPLES, name) for name in MATMUL_SHAPES
                   if name not in MATMUL_SAMPLES_REFUSED])


@pytest.mark.parametrize("repo,path,name", MATMUL_CASES, ids=[f"{r}-{n}" for r, _, n in MATMUL_CASES])
def test_matmul_tutorial(kernels, repo, path, name):
    kernel = getattr(kernels.load(repo, path), name)
    K, M, N, meta = MATMUL_SHAPES[name]
    lhsT, rhs = normal(K, M), normal(K, N)
    result = simulate(kernel, lhsT, rhs, **meta)
    np.testing.assert_allclose(result, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def mamba_reference(delta, u, A, B, C):
    """The selective scan: state[c, n] = exp(delta*A) * state + delta*B*u, output sums C*state over n."""
    batch, channels, seq_len = delta.shape
    out = np.zeros((batch, channels, seq_len))
    for b in range(batch):
        state = np.zeros((channels, A.shape[1]))
        for t in range(seq_len):
            d = delta[b, :, t, None].astype(np.float64)
            state = np.exp(d * A) * state + d * B[b, None, :, t] * u[b, :, t, None]
            out[b, :, t] = state @ C[b, :, t]
    return out


@pytest.mark.parametrize("version", ["mamba_v1", "mamba_v2", "mamba_v3"])
def test_fused_mamba(kernels, version):
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/fused_mamba/mamba_nki_kernels.py")
    kernel = getattr(module, version)
    batch, channels, state_size, seq_len = 1, 128, 4, 512  # v3 tiles the sequence by 512
    delta = np.abs(normal(batch, channels, seq_len)) * 0.1
    u, A = normal(batch, channels, seq_len), -np.abs(normal(channels, state_size))
    B, C = normal(batch, state_size, seq_len), normal(batch, state_size, seq_len)
    result = simulate(kernel, delta, u, A, B, C)
    np.testing.assert_allclose(result, mamba_reference(delta, u, A, B, C), rtol=1e-4, atol=1e-4)



MX_SDK = "nki/deep-dives/src/mxfp-matmul/mx_kernels.py"
MX_ERROR = {"float8_e4m3fn_x4": 0.05, "float8_e5m2_x4": 0.1}
"""Relative error of an MX matmul against the unquantised product: 3 and 2 mantissa bits (measured
3.8% and 7.5% for normal inputs); a wrong layout or scale gives errors near 100%."""


def mx_operands():
    """bf16 stationary [4*128, 128] and moving [4*128, 512] tiles, and their exact product."""
    stationary = normal(512, 128, dtype=ml_dtypes.bfloat16)
    moving = normal(512, 512, dtype=ml_dtypes.bfloat16)
    return stationary, moving, stationary.astype(np.float64).T @ moving.astype(np.float64)


def relative_error(result, expected):
    return np.linalg.norm(result.astype(np.float64) - expected) / np.linalg.norm(expected)


@pytest.mark.parametrize("mx_dtype", list(MX_ERROR))
@pytest.mark.parametrize("use_tensor_copy", [True, False], ids=["tensor_copy", "dma"])
def test_sdk_mx_matmul_quantized_on_device(kernels, mx_dtype, use_tensor_copy):
    """trn3: strided relayout, quantize_mx of both operands, nc_matmul_mx."""
    module = kernels.load("aws-neuron-sdk", MX_SDK)
    stationary, moving, expected = mx_operands()
    result = simulate(module.kernel_copy_strided_quantize_matmul_mx, stationary, moving,
                      getattr(tnki.language, mx_dtype), use_tensor_copy=use_tensor_copy, target="trn3")
    assert relative_error(result, expected) < MX_ERROR[mx_dtype]


def test_sdk_mx_matmul_packed_scales(kernels):
    module = kernels.load("aws-neuron-sdk", MX_SDK)
    stationary, moving, expected = mx_operands()
    result = simulate(module.kernel_copy_strided_quantize_matmul_mx_packed_scale, stationary, moving,
                      tnki.language.float8_e4m3fn_x4, target="trn3")
    assert relative_error(result, expected) < 0.05


def test_samples_mx_matmul_with_platform_target_is_refused_at_its_line(kernels):
    """nki-samples' MX tutorial still passes nki.jit(platform_target=...), an error since NKI 0.3.0."""
    with pytest.raises(ConfigError, match=r"^mx_kernels\.py:\d+ in <module>: nki.jit\(platform_target="):
        kernels.load("nki-samples", f"{SAMPLES_TUTORIALS}/mxfp-matmul/mx_kernels.py")


# --- nki-library ---------------------------------------------------------------------------------

def test_nkilib_cumsum(kernels):
    module = kernels.load("nki-library", f"{NKILIB}/core/cumsum/cumsum.py")
    x = normal(200, 3000)
    expected = np.cumsum(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(simulate(module.cumsum, x), expected, atol=1e-3)


@pytest.mark.parametrize("shape", [(4, 2048), (2, 3, 1000)])
def test_nkilib_cascaded_max(kernels, shape):
    module = kernels.load("nki-library", f"{NKILIB}/core/max/cascaded_max.py")
    x = normal(*shape)
    values, indices = tnki.simulate(module.cascaded_max[2], target="trn2")(x)
    np.testing.assert_array_equal(values.reshape(-1), x.reshape(-1, shape[-1]).max(axis=1))
    np.testing.assert_array_equal(indices.reshape(-1), x.reshape(-1, shape[-1]).argmax(axis=1))


def rotate_half_pairs(x, cos, sin, contiguous):
    """RoPE on a [d_head, ...] array: rotate (first half, second half) or (even, odd) element pairs."""
    half = x.shape[0] // 2
    real, imag = (x[:half], x[half:]) if contiguous else (x[0::2], x[1::2])
    out_real, out_imag = real * cos - imag * sin, real * sin + imag * cos
    if contiguous:
        return np.concatenate([out_real, out_imag])
    return np.stack([out_real, out_imag], axis=1).reshape(x.shape)


@pytest.mark.parametrize("contiguous,lnc", [(True, 1), (False, 1), (True, 2)])
def test_nkilib_rope(kernels, contiguous, lnc):
    module = kernels.load("nki-library", f"{NKILIB}/core/embeddings/rope.py")
    d_head, batch, heads, seq = 64, 2, 2, 128
    x = normal(d_head, batch, heads, seq)
    angle = rng.uniform(0, 2 * np.pi, (d_head // 2, batch, seq)).astype(np.float32)
    cos, sin = np.cos(angle), np.sin(angle)
    kernel = module.RoPE[lnc] if lnc > 1 else module.RoPE
    result = tnki.simulate(kernel, target="trn2")(x, cos, sin, lnc_shard=lnc > 1,
                                                   contiguous_layout=contiguous)
    expected = rotate_half_pairs(x, cos[:, :, None, :], sin[:, :, None, :], contiguous)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_nkilib_rope_hf(kernels):
    module = kernels.load("nki-library", f"{NKILIB}/core/embeddings/rope_hf.py")
    batch, q_heads, k_heads, seq, d_head = 1, 2, 1, 128, 64
    q, k = normal(batch, q_heads, seq, d_head), normal(batch, k_heads, seq, d_head)
    angle = rng.uniform(0, 2 * np.pi, (seq, d_head // 2)).astype(np.float32)
    cos = np.concatenate([np.cos(angle)] * 2, axis=-1)
    sin = np.concatenate([np.sin(angle)] * 2, axis=-1)
    q_out, k_out = np.zeros_like(q), np.zeros_like(k)
    results = simulate(module.rope_hf, q, k, q_out, k_out, cos=cos, sin=sin)

    def rope(x):
        rotated = np.concatenate([-x[..., d_head // 2:], x[..., :d_head // 2]], axis=-1)
        return x * cos + rotated * sin

    for result, x in zip(results, (q, k), strict=True):
        np.testing.assert_allclose(result, rope(x), rtol=1e-5, atol=1e-5)


def test_nkilib_find_nonzero_indices(kernels):
    module = kernels.load("nki-library", f"{NKILIB}/core/subkernels/find_nonzero_indices.py")
    tokens, columns = 256, 8
    x = (rng.random((tokens, columns)) < 0.3).astype(np.float32)
    indices, counts = tnki.simulate(module.find_nonzero_indices[2], target="trn2")(x)
    for column in range(columns):
        found = np.flatnonzero(x[:, column])
        assert counts.reshape(-1)[column] == len(found)
        np.testing.assert_array_equal(indices[column, :len(found)], found)
        assert (indices[column, len(found):] == -1).all()


def tkg_norm_layout(normed, lnc):
    """[tokens, H] -> the [128, tokens, H/128] tile the tkg norms write: H split (128, H/128), and with
    LNC=2 each half of H split that way and the halves side by side."""
    tokens, hidden = normed.shape
    split = normed.reshape(tokens, lnc, 128, hidden // 128 // lnc)
    return split.transpose(2, 0, 1, 3).reshape(128, tokens, -1)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("lnc,batch,seq,hidden,shard_on_h", [
    (1, 1, 4, 2048, False), (2, 2, 8, 3072, False), (2, 2, 8, 8192, True)])
def test_nkilib_norm_tkg(kernels, norm, lnc, batch, seq, hidden, shard_on_h):
    """The tkg subkernels take their output buffer as an argument; the library's tests jit them as here."""
    module = kernels.load("nki-library", f"{NKILIB}/core/subkernels/{norm}_tkg.py")
    x, gamma, beta = normal(batch, seq, hidden), normal(1, hidden), normal(1, hidden)
    wide = x.astype(np.float64).reshape(batch * seq, hidden)
    if norm == "rmsnorm":
        expected, extra = wide / np.sqrt((wide ** 2).mean(axis=1, keepdims=True) + 1e-6) * gamma, {}
    else:
        centred = wide - wide.mean(axis=1, keepdims=True)
        expected = centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + 1e-6) * gamma + beta
        extra = {"beta": beta}
    kernel = tnki.jit(getattr(module, f"{norm}_tkg"))
    out = np.zeros((128, batch * seq, hidden // 128), np.float32)
    result = simulate(kernel[lnc] if lnc > 1 else kernel, x, gamma, out, shard_on_h=shard_on_h, **extra)
    np.testing.assert_allclose(result, tkg_norm_layout(expected, lnc), atol=1e-5)

def test_nkilib_dynamic_elementwise_add(kernels):
    module = kernels.load("nki-library", f"{NKILIB}/experimental/dynamic_shapes/dynamic_elementwise_add.py")
    a, b = normal(512, 512).astype(ml_dtypes.bfloat16), normal(512, 512).astype(ml_dtypes.bfloat16)
    result = simulate(module.dynamic_elementwise_add, a, b, np.array([[2]], np.int32))
    expected = (a[:256].astype(np.float32) + b[:256]).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(result[:256], expected)


def log_sum_exp(logits):
    wide = logits.astype(np.float64)
    return np.log(np.exp(wide - wide.max(axis=1, keepdims=True)).sum(axis=1)) + wide.max(axis=1)


def test_nkilib_cross_entropy_forward_and_backward(kernels):
    module = kernels.load("nki-library", f"{NKILIB}/experimental/loss/cross_entropy.py")
    positions, vocab = 8, 1024
    logits, targets = normal(positions, vocab), rng.integers(0, vocab, positions).astype(np.int32)
    sizes = {"positions_per_batch": 4, "chunk_size": 512, "dtype": np.float32}
    loss, lse = tnki.simulate(module.cross_entropy_forward[2], target="trn2")(logits, targets, **sizes)
    expected_lse = log_sum_exp(logits)
    np.testing.assert_allclose(lse.reshape(-1), expected_lse, rtol=1e-5, atol=1e-5)
    target_logits = logits[np.arange(positions), targets]
    np.testing.assert_allclose(loss.reshape(-1), expected_lse - target_logits, atol=1e-5)

    expected = np.exp(logits - expected_lse[:, None])  # before the call: by default it writes into logits
    grad = tnki.simulate(module.cross_entropy_backward[2], target="trn2")(logits, targets, lse, **sizes)
    expected[np.arange(positions), targets] -= 1
    np.testing.assert_allclose(grad, expected / positions, atol=1e-6)


def test_nkilib_find_nonzero_indices_with_count(kernels):
    path = "experimental/benchmark/find_nonzero_indices_with_count.py"
    module = kernels.load("nki-library", f"{NKILIB}/{path}")
    x = (rng.random((1, 300)) < 0.3).astype(np.float32)
    found = np.flatnonzero(x[0])
    expected = np.full(301, -1, np.int32)
    expected[:len(found)], expected[-1] = found, len(found)
    np.testing.assert_array_equal(simulate(module.find_nonzero_indices_with_count, x).reshape(-1), expected)


@pytest.mark.parametrize("lnc", [1, 2])
def test_nkilib_rotational_topk(kernels, lnc):
    module = kernels.load("nki-library", f"{NKILIB}/core/topk/rotational_topk.py")
    x, k = normal(4, 1, 2048), 8
    values, indices = module.topk[lnc](x, k)  # the library's own launcher picks the grid
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=-1))
    np.testing.assert_array_equal(indices, order)


def softmax(x):
    exp = np.exp(x - x.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_nkilib_router_topk(kernels, pre_norm):
    """MoE router: logits = x.T @ w + bias, top-k experts; softmax over all experts before top-k
    (affinities are the full softmax) or over the k chosen logits, scattered to their experts."""
    module = kernels.load("nki-library", f"{NKILIB}/core/router_topk/router_topk.py")
    common_types = kernels.load("nki-library", f"{NKILIB}/core/utils/common_types.py")
    tokens, hidden, experts, k = 64, 256, 16, 4
    x, w, bias = normal(hidden, tokens), normal(hidden, experts) * 0.1, normal(1, experts)
    outputs = (np.zeros((tokens, experts), np.float32), np.zeros((tokens, experts), np.float32),
               np.zeros((tokens, k), np.uint32))
    logits, index, affinities = simulate(tnki.jit(module.router_topk), x, w, bias, *outputs,
                                         common_types.RouterActFnType.SOFTMAX, k, module.XHBMLayout_H_T__0,
                                         module.XSBLayout_tp102__0, router_pre_norm=pre_norm)
    expected_logits = x.T.astype(np.float64) @ w + bias
    top = np.argsort(-expected_logits, axis=1, kind="stable")[:, :k]
    np.testing.assert_allclose(logits, expected_logits, atol=1e-5)
    np.testing.assert_array_equal(index, top)
    if pre_norm:
        expected = softmax(expected_logits)
    else:
        expected = np.zeros_like(expected_logits)
        np.put_along_axis(expected, top, softmax(np.take_along_axis(expected_logits, top, axis=1)), axis=1)
    np.testing.assert_allclose(affinities, expected, atol=1e-6)


@pytest.mark.parametrize("all_experts,mask_unselected", [(False, False), (True, False), (True, True)])
def test_nkilib_moe_tkg(kernels, all_experts, mask_unselected):
    """MoE decode MLP in bf16: each token's experts (its top k, or all, optionally masked to its top k) apply
    silu(x @ gate) * (x @ up) @ down, summed with the token's affinities (POST_SCALE)."""
    module = kernels.load("nki-library", f"{NKILIB}/core/moe/moe_tkg/moe_tkg.py")
    common_types = kernels.load("nki-library", f"{NKILIB}/core/utils/common_types.py")
    tokens, hidden, inner, experts, k = 4, 256, 128, 4, 2
    bf16 = ml_dtypes.bfloat16
    x, gate_up = normal(tokens, hidden, dtype=bf16), (normal(experts, hidden, 2, inner) * 0.1).astype(bf16)
    down = (normal(experts, inner, hidden) * 0.1).astype(bf16)
    affinities = softmax(normal(tokens, experts))
    chosen = np.argsort(-affinities, axis=1)[:, :k].astype(np.int32)
    extra = {"rank_id": np.zeros((1, 1), np.int32), "mask_unselected_experts": mask_unselected}
    kernel = tnki.jit(module.moe_tkg)[2]  # masking reads expert_index from shared HBM (inputs at LNC=2)
    result = simulate(kernel, x, gate_up, down, affinities, chosen, all_experts,
                      expert_affinities_scaling_mode=common_types.ExpertAffinityScaleMode.POST_SCALE,
                      **(extra if all_experts else {}))
    expected = np.zeros((tokens, hidden))
    for token in range(tokens):
        used = chosen[token] if not all_experts or mask_unselected else range(experts)
        for expert in used:
            gate, up = (x[token].astype(np.float64) @ gate_up[expert, :, j] for j in (0, 1))
            activated = gate / (1 + np.exp(-gate)) * up
            expected[token] += affinities[token, expert] * activated @ down[expert].astype(np.float64)
    np.testing.assert_allclose(result.astype(np.float64), expected, atol=0.02 * np.abs(expected).max())

def test_nkilib_output_projection_cte(kernels):
    path = "core/output_projection/output_projection_cte/output_projection_cte.py"
    module = kernels.load("nki-library", f"{NKILIB}/{path}")
    batch, heads, d_head, seq, hidden = 1, 2, 64, 512, 256
    attention, weight = normal(batch, heads, d_head, seq), normal(heads * d_head, hidden)
    expected = np.einsum("bnds,ndh->bsh", attention.astype(np.float64), weight.reshape(heads, d_head, hidden))
    np.testing.assert_allclose(simulate(module.output_projection_cte, attention, weight), expected, atol=1e-4)


@pytest.mark.parametrize("pad", [0, 1])
def test_nkilib_depthwise_conv1d(kernels, pad):
    module = kernels.load("nki-library", f"{NKILIB}/experimental/conv/depthwise_conv1d.py")
    channels, length, taps = 128, 64, 3
    x, filters = normal(2, channels, 1, length), normal(channels, 1, 1, taps)
    padded = np.pad(x, ((0, 0), (0, 0), (0, 0), (pad, pad)))
    out_length = length + 2 * pad - taps + 1
    expected = sum(padded[..., j:j + out_length] * filters[None, :, :, 0, j, None] for j in range(taps))
    result = simulate(module.depthwise_conv1d_implicit_gemm, x, filters, padding=((0, 0), (pad, pad)),
                      feature_group_count=channels)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_nkilib_output_projection_tkg(kernels):
    module = kernels.load("nki-library", f"{NKILIB}/core/output_projection/output_projection_tkg.py")
    d_head, batch, heads, seq, hidden = 128, 2, 2, 1, 512
    attention, weight = normal(d_head, batch, heads, seq), normal(heads * d_head, hidden)
    bias = normal(1, hidden)
    expected = np.einsum("dbns,ndh->bsh", attention.astype(np.float64), weight.reshape(heads, d_head, hidden))
    result = simulate(module.output_projection_tkg, attention, weight, bias=bias)
    np.testing.assert_allclose(result, expected.reshape(batch * seq, hidden) + bias, atol=1e-4)


@pytest.mark.parametrize("batch,c_in,c_out,length,taps,padding,stride,dilation", [
    (2, 64, 96, 100, 3, (1, 1), 1, 1),
    (1, 200, 130, 50, 4, (0, 2), 2, 2),  # channels over one partition tile, strided and dilated
])
def test_nkilib_conv1d(kernels, batch, c_in, c_out, length, taps, padding, stride, dilation):
    module = kernels.load("nki-library", f"{NKILIB}/experimental/conv/conv1d.py")
    x, filters, bias = normal(batch, c_in, length), normal(taps, c_in, c_out), normal(c_out)
    result = simulate(module.conv1d, x, filters, bias=bias, stride=stride, padding=padding, dilation=dilation)
    padded = np.pad(x, ((0, 0), (0, 0), padding)).astype(np.float64)
    out_length = (length + sum(padding) - dilation * (taps - 1) - 1) // stride + 1
    expected = np.zeros((batch, c_out, out_length)) + bias[:, None]
    for tap in range(taps):
        window = padded[:, :, tap * dilation:tap * dilation + stride * (out_length - 1) + 1:stride]
        expected += np.einsum("bcl,co->bol", window, filters[tap])
    np.testing.assert_allclose(result, expected, atol=1e-4)



def test_nkilib_moe_block_tkg(kernels):
    """The decode MoE block (LNC=2): RMSNorm, bf16 router, softmax, top-2 experts, affinity-weighted
    expert MLPs; also returns the router logits."""
    module = kernels.load("nki-library", f"{NKILIB}/core/moe_block/moe_block_tkg.py")
    common_types = kernels.load("nki-library", f"{NKILIB}/core/utils/common_types.py")
    tokens, hidden, inner, experts, k = 4, 256, 128, 8, 2
    bf16 = ml_dtypes.bfloat16
    x, gamma = normal(1, tokens, hidden, dtype=bf16), (1 + 0.1 * normal(1, hidden)).astype(bf16)
    router = (normal(hidden, experts) * 0.5).astype(bf16)
    gate_up = (normal(experts, hidden, 2, inner) * 0.1).astype(bf16)
    down = (normal(experts, inner, hidden) * 0.1).astype(bf16)
    out, logits = simulate(module.moe_block_tkg[2], x, gamma, router, gate_up, down, top_k=k,
                           router_act_fn=common_types.RouterActFnType.SOFTMAX,
                           expert_affinities_scaling_mode=common_types.ExpertAffinityScaleMode.POST_SCALE)
    wide = x.astype(np.float64)[0]
    normed = (wide / np.sqrt((wide ** 2).mean(axis=1, keepdims=True) + 1e-6) * gamma).astype(bf16)
    expected_logits = normed.astype(np.float64) @ router
    affinities = softmax(expected_logits)
    expected = np.zeros((tokens, hidden))
    for token in range(tokens):
        for expert in np.argsort(-affinities[token])[:k]:
            gate, up = (normed[token].astype(np.float64) @ gate_up[expert, :, j] for j in (0, 1))
            activated = gate / (1 + np.exp(-gate)) * up
            expected[token] += affinities[token, expert] * activated @ down[expert].astype(np.float64)
    for result, reference in ((logits, expected_logits), (out, expected)):  # bf16
        np.testing.assert_allclose(result.astype(np.float64), reference, atol=0.02 * np.abs(reference).max())

@pytest.mark.parametrize("implementation,tokens", [("shard_on_i", 8), ("shard_on_block", 127)])
def test_nkilib_moe_cte(kernels, implementation, tokens):
    """MoE prefill, blockwise: each block of token slots belongs to one expert; empty slots point at the
    padding row T. The kernel (LNC=2, as the library runs it) calls a jit kernel per implementation.
    shard_on_block sums the two cores' outputs in 128-row tiles of a [T + 1, 2, H] output (the sum in
    [:, 0]), so it needs T + 1 to fill them."""
    module = kernels.load("nki-library", f"{NKILIB}/core/moe/moe_cte/moe_cte.py")
    hidden, inner, experts, block = 512, 512, 2, 256
    bf16 = ml_dtypes.bfloat16
    x = np.concatenate([normal(tokens, hidden), np.zeros((1, hidden), np.float32)]).astype(bf16)
    gate_up = (normal(experts, hidden, 2, inner) * 0.1).astype(bf16)
    down = (normal(experts, inner, hidden) * 0.1).astype(bf16)
    expert_of = np.arange(tokens) % experts
    affinities = np.zeros((tokens + 1, experts), np.float32)
    affinities[np.arange(tokens), expert_of] = rng.random(tokens)
    slots = np.full(experts * block, tokens, np.int32)  # one block per expert
    for expert in range(experts):
        routed = np.flatnonzero(expert_of == expert)
        slots[expert * block:expert * block + len(routed)] = routed
    spec = module.MoECTESpec(implementation=getattr(module.MoECTEImplementation, implementation))
    result = simulate(module.moe_cte[2], x, affinities.reshape(-1, 1), gate_up, down, slots,
                      np.arange(experts, dtype=np.int32).reshape(experts, 1), block, spec)
    expected = np.zeros((tokens, hidden))
    for token, expert in enumerate(expert_of):
        gate, up = (x[token].astype(np.float64) @ gate_up[expert, :, j] for j in (0, 1))
        activated = gate / (1 + np.exp(-gate)) * up
        expected[token] = affinities[token, expert] * activated @ down[expert].astype(np.float64)
    tolerance = 0.02 * np.abs(expected).max()  # bf16
    if result.ndim == 3:  # shard_on_block accumulates into [T, 2, H]; the sum lands in [:, 0]
        result = result[:, 0]
    np.testing.assert_allclose(result[:tokens].astype(np.float64), expected, atol=tolerance)


@pytest.mark.parametrize("seq,dtype", [
    (128, ml_dtypes.bfloat16), (128, np.float32),  # context encoding (qkv_cte: a 4-D dma_transpose load)
    (4, np.float32), (4, ml_dtypes.bfloat16),  # token generation (qkv_tkg)
])
@pytest.mark.parametrize("lnc", [1, 2])
def test_nkilib_qkv(kernels, seq, dtype, lnc):
    """qkv_cte computes in bf16 even for fp32 inputs (qkv_cte_utils.py: `compute_mm_dtype`), so its
    results are checked to bf16 precision; qkv_tkg keeps fp32."""
    module = kernels.load("nki-library", f"{NKILIB}/core/qkv/qkv.py")
    x, weights = normal(1, seq, 256).astype(dtype), (normal(256, 384) * 0.1).astype(dtype)
    result = simulate(module.qkv[lnc] if lnc > 1 else module.qkv, x, weights)
    expected = x.astype(np.float64) @ weights.astype(np.float64)
    tolerance = 1e-5 if dtype == np.float32 and seq < 128 else 0.01 * np.abs(expected).max()
    np.testing.assert_allclose(np.asarray(result).astype(np.float64), expected, atol=tolerance)


def test_nkilib_indexed_flatten(kernels):
    """Row e of [E, T], cut in blocks of f_len, lands at output blocks offset[e], offset[e] + 1, ...;
    blocks past the end are skipped (oob_mode=skip) and untouched output keeps the padding -1."""
    module = kernels.load("nki-library", f"{NKILIB}/core/subkernels/indexed_flatten.py")
    rows, length, block, out_length = 4, 64, 4, 256
    x, offsets = rng.integers(0, 1000, (rows, length)).astype(np.int32), np.array([0, 20, 40, 56], np.int32)
    result = tnki.simulate(module.indexed_flatten[2], target="trn2")(x, block, out_length, offsets)
    expected = np.full((out_length // block, block), -1, np.int32)
    for row, offset in enumerate(offsets):
        kept = min(length // block, out_length // block - offset)
        expected[offset:offset + kept] = x[row].reshape(-1, block)[:kept]
    np.testing.assert_array_equal(np.asarray(result).reshape(-1, block), expected)


def test_nkilib_gen_mask_tkg_hbm(kernels):
    """Decode attention mask over a strided KV cache: row t*128 + p stands for token p*(S/128) + t, and
    is 1 where that token precedes the query's position."""
    module = kernels.load("nki-library", f"{NKILIB}/core/attention/gen_mask_tkg.py")
    batch, heads, active, prior = 2, 2, 1, 512
    positions = np.array([[100, 300]], np.int32)
    mask = simulate(tnki.jit(module.gen_mask_tkg_hbm), positions, batch, heads, active, prior)
    tiles = prior // 128
    token = (np.arange(128)[None, :] * tiles + np.arange(tiles)[:, None]).reshape(-1)  # of row t*128 + p
    expected = token[:, None, None, None] < positions.reshape(batch, 1, active)
    np.testing.assert_array_equal(mask, np.broadcast_to(expected, (prior, batch, heads, active)))

def attention_reference(q, k, v, scale):
    """Causal softmax(scale * q @ k) @ v for q [seq_q, d], k [d, seq_k], v [seq_k, d]."""
    scores = scale * q.astype(np.float64) @ k
    scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True) @ v


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("batch,heads", [(1, 1), (2, 2)])
def test_nkilib_attention_tkg(kernels, dtype, batch, heads):
    """Decode attention over a KV cache plus the active token, with a mask over the cache; q and the
    active k are given in SBUF, as the library's own test wrapper does (its only layout without RoPE)."""
    module = kernels.load("nki-library", f"{NKILIB}/core/attention/attention_tkg.py")
    utils = kernels.load("nki-library", f"{NKILIB}/core/attention/attention_tkg_utils.py")
    allocator = kernels.load("nki-library", f"{NKILIB}/core/utils/allocator.py")
    logging = kernels.load("nki-library", f"{NKILIB}/core/utils/logging.py")
    d_head, prior = 64, 256
    cfg = utils.AttnTKGConfig(bs=batch, q_head=heads, s_active=1, curr_sprior=prior, full_sprior=prior,
                              d_head=d_head, qk_in_sb=True)
    nl, nisa = tnki.language, tnki.isa

    @tnki.jit
    def decode_attention(q, k_active, v_active, k_prior, v_prior, mask):
        room = nl.tile_size.total_available_sbuf_size - 16 * 1024  # as the library's test leaves
        sbm = allocator.SbufManager(0, room, logging.Logger("SBM"))
        sbm.open_scope()
        out = nl.ndarray((batch, heads, d_head, 1), dtype=q.dtype, buffer=nl.shared_hbm)
        q_sb = sbm.alloc_stack(q.shape, dtype=q.dtype, buffer=nl.sbuf)
        k_sb = sbm.alloc_stack(k_active.shape, dtype=k_active.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_sb, src=q)
        nisa.dma_copy(dst=k_sb, src=k_active)
        out, _ = module.attention_tkg(q_sb, k_sb, v_active, k_prior, v_prior, mask, out, cfg, sbm)
        sbm.close_scope()
        return out

    q, k_active = normal(d_head, batch * heads).astype(dtype), normal(d_head, batch).astype(dtype)
    v_active = normal(batch, 1, 1, d_head).astype(dtype)
    k_prior = normal(batch, 1, d_head, prior).astype(dtype)
    v_prior = normal(batch, 1, prior, d_head).astype(dtype)
    valid = rng.random((prior, batch, heads, 1)) < 0.6
    result = simulate(decode_attention, q, k_active, v_active, k_prior, v_prior, valid.astype(dtype))
    expected = np.zeros((batch, heads, d_head))
    for b in range(batch):  # the active token takes the cache's last slot, under that slot's mask
        keys = np.concatenate([k_prior[b, 0][:, :-1], k_active[:, b:b + 1]], axis=1).astype(np.float64)
        values = np.concatenate([v_prior[b, 0][:-1], v_active[b, 0]]).astype(np.float64)
        for h in range(heads):
            scores = q[:, b * heads + h].astype(np.float64) @ keys
            expected[b, h] = softmax(np.where(valid[:, b, h, 0], scores, -np.inf)) @ values
    tolerance = 1e-5 if dtype == np.float32 else 0.01 * np.abs(expected).max()
    np.testing.assert_allclose(result[..., 0].astype(np.float64), expected, atol=tolerance)


def test_nkilib_attention_cte(kernels):
    """The kernel keeps softmax in fp32 and everything else in bf16 (its docstring), so fp32 inputs
    are checked to bf16 precision. Its ModularAllocator places tiles at addresses it reuses."""
    module = kernels.load("nki-library", f"{NKILIB}/core/attention/attention_cte.py")
    q, k, v = normal(1, 256, 64), normal(1, 64, 256), normal(1, 256, 64)
    result = simulate(module.attention_cte, q, k, v, scale=0.125, causal_mask=True)
    expected = attention_reference(q[0], k[0], v[0], 0.125)
    np.testing.assert_allclose(result[0], expected, atol=0.02 * np.abs(expected).max())


def attention_backward_reference(q, k, v, dy, scale, causal):
    """Attention forward and its gradients for one head, all [d, seq]: o, lse, dq, dk, dv."""
    q, k, v, dy = (a.astype(np.float64) for a in (q, k, v, dy))
    scores = scale * q.T @ k
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    row_max = scores.max(axis=1, keepdims=True)
    row_sum = np.exp(scores - row_max).sum(axis=1, keepdims=True)
    probs = np.exp(scores - row_max) / row_sum
    out, d_out = probs @ v.T, dy.T
    d_scores = probs * (d_out @ v - (d_out * out).sum(axis=1, keepdims=True))
    return (out.T, (row_max + np.log(row_sum))[:, 0], scale * (d_scores @ k.T).T, scale * q @ d_scores,
            (probs.T @ d_out).T)


@pytest.mark.parametrize("causal", [False, True])
def test_nkilib_attention_bwd(kernels, causal):
    module = kernels.load("nki-library", f"{NKILIB}/core/attention/attention_bwd.py")
    d_head, seq = 64, 256
    q, k, v, dy = (normal(1, 1, d_head, seq) for _ in range(4))
    head = (q[0, 0], k[0, 0], v[0, 0], dy[0, 0])
    out, lse, *grads = attention_backward_reference(*head, d_head ** -0.5, causal)
    lse_tiles = lse.reshape(seq // 128, 128).T[None, None].astype(np.float32)  # [.., partition, tile]
    results = simulate(module.attention_bwd, q, k, v, out[None, None].astype(np.float32), dy, lse_tiles,
                       use_causal_mask=causal)
    for result, expected in zip(results, grads, strict=True):
        np.testing.assert_allclose(result[0, 0], expected, atol=1e-5)

@pytest.mark.parametrize("lnc", [1, 2])
def test_nkilib_topk_reduce(kernels, lnc):
    """MoE top-K reduction: rows scattered by an all_to_all_v, each tagged with its token's index
    (an int32 packed in the last two bf16 columns), summed per token by gather read-modify-writes
    (`dma_compute` with a vector_offset source). The sums are checked bit for bit against bf16 adds
    in the kernel's order: each token's rows in ascending row order."""
    module = kernels.load("nki-library", f"{NKILIB}/experimental/collectives/topk_reduce.py")
    tokens, k, hidden, rows = 16, 4, 256, 64
    data = np.zeros((rows, hidden + 2), ml_dtypes.bfloat16)
    data[:, :hidden] = normal(rows, hidden).astype(ml_dtypes.bfloat16)
    token = np.full(rows, -1, np.int32)  # padding rows belong to no token
    token[rng.permutation(rows)[:tokens * k]] = np.repeat(np.arange(tokens), k)
    data.view(np.uint16)[:, hidden:] = token.view(np.uint16).reshape(rows, 2)
    kernel = module.topk_reduce[lnc] if lnc > 1 else module.topk_reduce
    result = simulate(kernel, data, tokens, k)
    expected = np.empty((tokens, hidden), ml_dtypes.bfloat16)
    for t in range(tokens):
        picked = np.flatnonzero(token == t)
        total = data[picked[0], :hidden]
        for row in picked[1:]:
            total = (total.astype(np.float32) + data[row, :hidden].astype(np.float32)).astype(total.dtype)
        expected[t] = total
    np.testing.assert_array_equal(result.view(np.uint16), expected.view(np.uint16))


COLLECTIVES = f"{NKILIB}/experimental/collectives"


def test_nkilib_allgather_sb2sb(kernels):
    """All-gather of SBUF tiles along the free dim, on 4 ranks: every rank gets the concatenation."""
    module = kernels.load("nki-library", f"{COLLECTIVES}/sb2sb_allgather.py")
    ranks = 4
    group = module.ReplicaGroup([list(range(ranks))])
    parts = [normal(128, 64) for _ in range(ranks)]
    results = system.launch(module.allgather_sb2sb, ranks, [(x, group, ranks) for x in parts])
    for result in results:
        np.testing.assert_array_equal(result, np.concatenate(parts, axis=1))


@pytest.mark.parametrize("through_hbm", [False, True])
def test_nkilib_fine_grained_allgather(kernels, through_hbm):
    """Ring all-gather by collective_permute_implicit with double buffering (SBUF tiles, or HBM),
    4 ranks at LNC=1: every rank's result holds each rank's rows at that rank's index."""
    module = kernels.load("nki-library", f"{COLLECTIVES}/fg_allgather.py")
    ranks = 4
    parts = [normal(64, 256) for _ in range(ranks)]
    results = system.launch(module.fine_grained_allgather, ranks, [(x, ranks, 1, through_hbm) for x in parts])
    for result in results:
        np.testing.assert_array_equal(np.asarray(result).reshape(ranks, 64, 256), np.stack(parts))


@pytest.mark.parametrize("through_hbm", [False, True])
def test_nkilib_allgather_compute_matmul(kernels, through_hbm):
    """All-gather of lhs overlapped with each rank's matmul against its own column shard of rhs."""
    module = kernels.load("nki-library", f"{COLLECTIVES}/fgcc.py")
    ranks, rows, k, n = 4, 128, 256, 512
    lhs = [normal(rows, k) for _ in range(ranks)]
    rhs = [normal(k, n) for _ in range(ranks)]
    results = system.launch(module.allgather_compute_matmul, ranks,
                            [(lhs[r], rhs[r], ranks, 1, through_hbm) for r in range(ranks)])
    gathered = np.concatenate(lhs).astype(np.float64)
    for rank, result in enumerate(results):
        np.testing.assert_allclose(np.asarray(result).reshape(ranks * rows, n), gathered @ rhs[rank],
                                   rtol=1e-5, atol=1e-4)


def test_nkilib_rmsnorm_quant_row(kernels):
    """Row quantisation to fp8 with the fp32 dequantisation scale packed as the last 4 bytes of each row."""
    module = kernels.load("nki-library", f"{NKILIB}/core/rmsnorm/rmsnorm_quant.py")
    hidden = 512
    x, gamma = normal(1, 128, hidden).astype(ml_dtypes.bfloat16), normal(hidden).astype(ml_dtypes.bfloat16)
    result = simulate(module.rmsnorm_quant_kernel, x, gamma, module.RmsNormQuantKernelArgs())
    wide = x.astype(np.float64)[0]
    normed = wide / np.sqrt((wide ** 2).mean(axis=1, keepdims=True) + 1e-6) * gamma.astype(np.float64)
    rows = np.ascontiguousarray(result[0]).view(np.uint8).reshape(128, -1)
    scale = rows[:, hidden:hidden + 4].copy().view(np.float32)
    values = rows[:, :hidden].view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    np.testing.assert_allclose(values * scale, normed, rtol=0.07, atol=0.02 * np.abs(normed).max())


# --- published sizes that need the compiler's allocation, in trace-only mode ---------------------

def spills(trace) -> int:
    return sum(1 for ins in trace if ins.param("spill"))


def assert_on_chip(trace):
    """Every SBUF operand of the trace lies inside the partition's bytes: the placement fits."""
    capacity = hardware.core(trace.target).sbuf_bytes_per_partition
    regions = [r for ins in trace for r in ins.outputs + ins.inputs if r.memory.value == "sbuf"]
    last = max(r.byte_span()[1] for r in regions)
    assert last < capacity


def test_sdk_mamba_v2_at_sequence_8192(kernels):
    """Seven [128, 8192] fp32 tiles fill trn2's SBUF while Python holds them all; placed by lifetime,
    with a few spills (as the tutorial's profile shows at this length), it runs (the tutorial's
    shapes: batch 1, 256 channels, state 16)."""
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/fused_mamba/mamba_nki_kernels.py")
    channels, state, seq = 256, 16, 8192
    specs = [tnki.TensorSpec(shape, np.float32) for shape in
             ((1, channels, seq), (1, channels, seq), (channels, state), (1, state, seq), (1, state, seq))]
    assert_on_chip(tnki.trace(module.mamba_v2, *specs, target="trn2"))


KERNEL_OPTIMIZATION = "nki/guides/tutorials/kernel-optimization.rst"


def test_sdk_kernel_optimization_tutorial_fp32_blocked_matmul_on_trn2(kernels, tmp_path):
    """The tutorial's last kernel (blocked in M, N and K, fp32, 4096x8192 @ 8192x8192): its result
    tiles, lhsT and rhs blocks take 224 KiB of trn2's 224 KiB per partition only because the lhsT
    and rhs tiles are done before the result is copied out. The page returns an `nl.hbm` tensor,
    which NKI 0.3.0 refuses ("Using nl.hbm for output tensors will cause compilation failures",
    nki/migration): unmodified it is refused at that line; with `nl.shared_hbm` it runs."""
    lhsT, rhs = tnki.TensorSpec((8192, 4096), np.float32), tnki.TensorSpec((8192, 8192), np.float32)
    page = kernels.load_code_block("aws-neuron-sdk", KERNEL_OPTIMIZATION, "result_tmps", tmp_path)
    with pytest.raises(TrnsimError, match=r"^kernel_optimization\.py:\d+ .*not nl.shared_hbm"):
        tnki.trace(page.matrix_multiply_kernel, lhsT, rhs, target="trn2")
    shared = kernels.load_code_block("aws-neuron-sdk", KERNEL_OPTIMIZATION, "result_tmps", tmp_path,
                                     edit=lambda code: code.replace("nl.hbm)", "nl.shared_hbm)"))
    trace = tnki.trace(shared.matrix_multiply_kernel, lhsT, rhs, target="trn2")
    assert sum(1 for ins in trace if ins.opcode.value == "nc_matmul") == 32 * 16 * 64
    assert_on_chip(trace)


def test_nkilib_rmsnorm_quant_hidden_16384_lnc2(kernels):
    """The library's LNC=2 test size (seq 2048, hidden 16384, bf16): first fit over tiles Python holds
    leaves 114 KB free in pieces too small for a 64 KiB tile; placed by lifetime, it fits."""
    module = kernels.load("nki-library", f"{NKILIB}/core/rmsnorm/rmsnorm_quant.py")
    x = tnki.TensorSpec((1, 2048, 16384), ml_dtypes.bfloat16)
    gamma = tnki.TensorSpec((1, 16384), ml_dtypes.bfloat16)
    arguments = module.RmsNormQuantKernelArgs()
    trace = tnki.trace(module.rmsnorm_quant_kernel[2], x, gamma, arguments, target="trn2")
    assert {ins.core for ins in trace} == {0, 1} and spills(trace) == 0
    assert_on_chip(trace)


# --- refused, with the kernel's line ------------------------------------------------------------

@pytest.mark.parametrize("name", MATMUL_SAMPLES_REFUSED)
def test_samples_matmul_passing_dtype_to_tensor_copy_is_refused(kernels, name):
    """nki-samples (6905a68) passes `dtype=` to nisa.tensor_copy, which NKI 0.6 does not take."""
    kernel = getattr(kernels.load("nki-samples", MATMUL_SAMPLES), name)
    K, M, N, _ = MATMUL_SHAPES[name]
    with pytest.raises(ArgumentError, match=r"^matrix_multiplication_nki_kernels\.py:\d+ in .*'dtype'"):
        simulate(kernel, normal(K, M), normal(K, N))


def test_sdk_layout_violation_is_refused_at_its_line(kernels):
    """The SDK's example of a layout error: a 256-partition tile."""
    module = kernels.load("aws-neuron-sdk", f"{SDK_EXAMPLES}/layout-violation.py")
    with pytest.raises(TrnsimError, match=r"^layout-violation\.py:\d+ in tensor_exp_kernel_: .*256"):
        simulate(module.tensor_exp_kernel_, normal(256, 512))

@pytest.mark.parametrize("version", ["mamba_v1", "mamba_v2", "mamba_v3"])
def test_samples_mamba_on_the_old_api_is_refused(kernels, version):
    """nki-samples' fused_mamba still uses nl.par_dim (NKI beta 1)."""
    module = kernels.load("nki-samples", f"{SAMPLES_TUTORIALS}/fused_mamba/mamba_nki_kernels.py")
    kernel = getattr(module, version)
    with pytest.raises(UnsupportedError, match=r"^mamba_nki_kernels\.py:\d+ in mamba_v\d: nl.par_dim"):
        simulate(kernel, normal(1, 128, 512), normal(1, 128, 512), normal(128, 4), normal(1, 4, 512),
                 normal(1, 4, 512))
