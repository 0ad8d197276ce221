"""Public kernels written for the old API (`neuronxcc.nki`), run unmodified under trnsim.

Run with TRNSIM_LEGACY_KERNELS=/tmp/legacy-kernels after
`python tools/export_legacy_kernels.py /tmp/legacy-kernels`, which exports (SOURCES there):

- aws-neuron-sdk 1043931fc6018761f2a6faab70a1b24d00b543d3 (tag v2.26.1), nki/test/test_*.py: the
  per-instruction tests, each a unittest module with its own numpy check, run as they are; and
  the small kernels of nki/examples (index, layout, SPMD matmul, profiling examples);
- nki-samples fc5c69f79c899d719f6c351fd01acf3c419a6b8b (the last commit before NKI beta 2), the
  tutorials and reference/attention.py (flash attention forward and backward);
- nki-samples c9c0ab0ff4cb66e6d46c91716568a6734e9c78ce, the attention forward performance series.

Tutorials with a `__main__` check are run as scripts and must print their own "match" line; the
others are checked against numpy references written here. docs/legacy-nki.md lists the results.
"""

import contextlib
import io
import os
import runpy
import sys
import unittest
from pathlib import Path

import numpy as np
import pytest

import trnsim.nki.compat as compat

ENV_VAR = "TRNSIM_LEGACY_KERNELS"
ROOT = Path(os.environ.get(ENV_VAR, "/nonexistent"))
if not ROOT.is_dir():
    pytest.skip(f"old-API kernels not available: set {ENV_VAR} to the output of "
                "tools/export_legacy_kernels.py", allow_module_level=True)

pytestmark = pytest.mark.kernels

SDK_TESTS = ROOT / "aws-neuron-sdk" / "nki" / "test"
SDK_EXAMPLES = ROOT / "aws-neuron-sdk" / "nki" / "examples"
TUTORIALS = ROOT / "nki-samples" / "src" / "nki_samples" / "tutorials"
SAMPLES_SRC = ROOT / "nki-samples" / "src"
ATTENTION_SERIES = ROOT / "nki-samples-attention" / "src" / "nki_samples" / "tutorials" / \
    "attention_fwd_performance"

NOT_PASSING = {
    "test_nki_isa_activation.py":
        "expects fp32 values from an activation with dtype=nl.bfloat16 (trnsim rounds to bfloat16 as the "
        "instruction does)",
    "test_nki_isa_dma_copy.py":
        "two cases expect numpy's IndexError text for an out-of-bounds DMA (trnsim raises HazardError naming "
        "the kernel line)",
    "test_nki_nl_gather_flattened.py":
        "memsets one element at partition 1..31; engines start an access only at partitions 0/32/64/96 (the "
        "contract refuses it)",
}
NO_TESTS = {"test_nki_isa_dma_transpose.py"}  # defines kernels but no test methods
SDK_FILES = sorted(p.name for p in SDK_TESTS.glob("test_*.py")) if SDK_TESTS.is_dir() else []


@pytest.fixture(scope="module", autouse=True)
def old_api():
    """`neuronxcc.nki` is trnsim's old-API front end for this module; environment and imports restored."""
    environment, path, modules = dict(os.environ), list(sys.path), set(sys.modules)
    with compat.enabled(legacy=True):
        yield
    os.environ.clear()
    os.environ.update(environment)
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def _module(path: Path):
    sys.path.insert(0, str(path.parent))
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location(f"legacy_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


def _param(name: str):
    marks = [pytest.mark.xfail(strict=True, reason=NOT_PASSING[name])] if name in NOT_PASSING else []
    if name in NO_TESTS:
        marks.append(pytest.mark.skip(reason="the file defines no test"))
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in SDK_FILES])
def test_sdk_instruction_test(name):
    suite = unittest.defaultTestLoader.loadTestsFromModule(_module(SDK_TESTS / name))
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    problems = [f"{test.id()}: {trace.strip().splitlines()[-1]}"
                for test, trace in result.failures + result.errors]
    assert result.testsRun and not problems, "\n".join(problems)


MAIN_CHECKS = {
    "tensor_addition/tensor_addition_nki_kernels.py": "NKI and NumPy match",
    "tensor_addition/spmd_tensor_addition_nki_kernels.py": "NKI and NumPy match",
    "tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py": "NKI and NumPy match",
    "transpose2d/transpose2d_nki_kernels.py": "NKI and NumPy match",
    "average_pool2d/average_pool2d_nki_kernels.py": "NKI and NumPy match",
    "rmsnorm/rmsnorm_nki_kernels.py": "NKI and NumPy match",
    "layernorm/layernorm_nki_kernel.py": "LayerNorm V1 and V2 matches? True",
    "fused_mamba/mamba_nki_kernels.py": "mamba v3 matches? True",
    "sd_attention/sd_attention_nki_kernels.py": "SD attention matches CPU reference? True",
}


@pytest.mark.parametrize("script", sorted(MAIN_CHECKS))
def test_tutorial_main(script, monkeypatch):
    """The tutorial as a script: its own inputs and its own check."""
    path = TUTORIALS / script
    monkeypatch.setattr(sys, "argv", [str(path)])
    monkeypatch.syspath_prepend(str(path.parent))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runpy.run_path(str(path), run_name="__main__")
    assert MAIN_CHECKS[script] in printed.getvalue()
    assert "False" not in printed.getvalue() and "differ" not in printed.getvalue()


rng = np.random.default_rng(0)


def test_softmax_tutorial(monkeypatch):
    """softmax_nki_kernels.py imports torch_xla (unused by the kernel): a stand-in module here."""
    import types
    for name in ("torch_xla", "torch_xla.core", "torch_xla.core.xla_model"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    module = _module(TUTORIALS / "softmax" / "softmax_nki_kernels.py")
    x = rng.standard_normal((250, 300)).astype(np.float32)  # two row tiles, the second masked
    exps = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(module.nki_softmax_kernel(x), exps / exps.sum(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-6)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(("kernel", "k", "m", "n"), [
    ("nki_matmul_basic_", 128, 64, 512), ("nki_matmul_tiled_", 256, 256, 1024),
    ("nki_matmul_hoist_load_", 256, 256, 1024), ("nki_matmul_block_free_dimension_", 256, 256, 2048),
    ("nki_matmul_fully_optimized_", 1024, 2048, 1024)])
def test_matmul_tutorial(kernel, k, m, n):
    module = _module(TUTORIALS / "matrix_multiplication" / "matrix_multiplication_nki_kernels.py")
    lhs_t, rhs = normal(k, m), normal(k, n)
    np.testing.assert_allclose(getattr(module, kernel)(lhs_t, rhs), lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)


def test_matmul_tutorial_benchmark_prints_a_latency(capsys):
    """The tutorial's benchmark helper on a small problem (its own call uses 8192 x 4096 x 8192)."""
    module = _module(TUTORIALS / "matrix_multiplication" / "matrix_multiplication_nki_kernels.py")
    import neuronxcc.nki as nki
    bench = nki.benchmark(warmup=5, iters=10)(module.nki_matmul_tiled_)
    bench(normal(256, 256), normal(256, 1024))
    assert bench.benchmark_result.nc_latency.get_latency_percentile(99) > 0
    assert "predicted latency" in capsys.readouterr().out


def attention_reference(q, k, v):
    scores = q.T.astype(np.float64) @ k
    scores = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (scores / scores.sum(axis=1, keepdims=True)) @ v.T


SERIES = ["attn_fwd_v1", "attn_fwd_v2", "attn_fwd_v3", "attn_fwd_v4", "attn_fwd_v5", "attn_fwd_v6",
          "attn_fwd_v7", "attn_fwd_v8", "attn_fwd_v8a", "attn_fwd_v9", "attn_fwd_v10", "attn_fwd_v11"]


@pytest.mark.parametrize("version", SERIES)
def test_attention_forward_performance_series(version):
    """Each step of the tutorial against the numpy attention, with the tutorial's inputs and
    tolerance (values in [-1, 1), atol 1e-2) at seqlen 512 (v1 and v2 do not tile: 128)."""
    module = _module(ATTENTION_SERIES / "attention_kernels.py")
    seqlen = 128 if version in ("attn_fwd_v1", "attn_fwd_v2") else 512
    q, k, v = ((rng.random((128, seqlen), np.float32) - 0.5) * 2 for _ in range(3))
    np.testing.assert_allclose(getattr(module, version)(q, k, v), attention_reference(q, k, v), atol=1e-2)


def _flash_module():
    sys.path.insert(0, str(SAMPLES_SRC))
    try:
        from nki_samples.reference import attention
        return attention
    finally:
        sys.path.remove(str(SAMPLES_SRC))


def _causal_softmax(q, k):
    scores = np.einsum("bhdq,bhdk->bhqk", q, k) / np.sqrt(q.shape[2])
    scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    exps = np.exp(scores - top)
    return exps / exps.sum(-1, keepdims=True), (top + np.log(exps.sum(-1, keepdims=True)))[..., 0]


def test_flash_attention_forward_and_backward():
    """reference/attention.py: flash_fwd (causal, bf16 matmuls) and flash_attn_bwd against numpy."""
    attention = _flash_module()
    q, k, v, dy = (normal(1, 1, 64, 512) for _ in range(4))
    seed = np.zeros((1,), np.int32)
    config = attention.FlashConfig(seq_tile_size=512, training=True, should_transpose_v=True)
    out, lse = attention.flash_fwd[1, 1](q, k, v, seed, use_causal_mask=True, config=config)
    probs, _ = _causal_softmax(q, k)
    np.testing.assert_allclose(out, np.einsum("bhqk,bhdk->bhqd", probs, v), atol=2e-2)
    out_t = np.ascontiguousarray(np.swapaxes(out, 2, 3))
    grads = attention.flash_attn_bwd[1, 1](q, k, v, out_t, dy, lse, seed, use_causal_mask=True,
                                          mixed_precision=True)
    d_out = np.swapaxes(dy, 2, 3)
    d_probs = np.einsum("bhqd,bhdk->bhqk", d_out, v)
    d_scores = probs * (d_probs - (d_probs * probs).sum(-1, keepdims=True)) / np.sqrt(q.shape[2])
    expected = (np.einsum("bhqk,bhdk->bhdq", d_scores, k), np.einsum("bhqk,bhdq->bhdk", d_scores, q),
                np.einsum("bhqk,bhqd->bhdk", probs, d_out))
    for got, want in zip(grads, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=3e-2)


def test_reference_fused_rmsnorm_qkv():
    """reference/allocated_fused_linear.py (direct allocation with ncc.sbuf/psum.mod_alloc)."""
    sys.path.insert(0, str(SAMPLES_SRC))
    try:
        from nki_samples.reference import allocated_fused_linear
    finally:
        sys.path.remove(str(SAMPLES_SRC))
    hidden = rng.standard_normal((1, 256, 512)).astype(np.float16)
    weights = (rng.standard_normal((512, 512)) / 20).astype(np.float16)
    x = hidden.astype(np.float32)
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) @ weights.astype(np.float32)
    got = allocated_fused_linear.allocated_fused_rms_norm_qkv(hidden, weights).astype(np.float32)
    assert np.abs(got - expected).max() <= 2e-3 * np.abs(expected).max()


def test_reference_adaptive_avg_pool2d():
    sys.path.insert(0, str(SAMPLES_SRC))
    try:
        from nki_samples.reference import vision
    finally:
        sys.path.remove(str(SAMPLES_SRC))
    x = normal(1, 128, 8, 8)
    np.testing.assert_allclose(vision.adaptive_avg_pool2d_kernel(x, (4, 4)),
                               x.reshape(1, 128, 4, 2, 4, 2).mean(axis=(3, 5)), rtol=1e-5, atol=1e-6)


def _example(name: str) -> dict:
    """An SDK example's names (its `__main__` needs torch_xla on a Neuron device: not run)."""
    return runpy.run_path(str(SDK_EXAMPLES / name))


@pytest.mark.parametrize(("name", "shape"), [("layout-pass.py", (128, 512)), ("prof-kernel.py", (128, 512)),
                                             ("layout-dynamic-loop.py", (100, 512)),
                                             ("layout-loop.py", (256, 512))])
def test_sdk_exp_examples(name, shape, monkeypatch):
    """layout-loop.py decorates with torch_neuronx.nki_jit, the PyTorch entry of the same jit: a
    stand-in module gives it. layout-dynamic-loop.py returns inside its loop (only the first 128
    rows are computed), so it gets fewer rows, which its mask handles."""
    import types

    import neuronxcc.nki as nki
    monkeypatch.setitem(sys.modules, "torch_neuronx", types.SimpleNamespace(nki_jit=nki.jit))
    x = normal(*shape)
    np.testing.assert_allclose(_example(name)["tensor_exp_kernel_"](x), np.exp(x), rtol=1e-6)


def test_sdk_layout_violation_is_refused_at_its_line():
    """layout-violation.py shows a 256-partition tile the compiler refuses; trnsim refuses it too."""
    from trnsim.errors import ShapeError
    with pytest.raises(ShapeError, match=r"layout-violation.py:\d+ in tensor_exp_kernel_: nl.load: "
                                         r".*256 partitions"):
        _example("layout-violation.py")["tensor_exp_kernel_"](normal(256, 512))


def test_sdk_index_examples():
    x = normal(128, 64)
    even, odd = _example("index-case-1.py")["tensor_split_kernel_"](x)
    np.testing.assert_array_equal(even, x[:, ::2])
    np.testing.assert_array_equal(odd, x[:, 1::2])
    image = np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6)
    np.testing.assert_array_equal(_example("index-case-3.py")["tensor_maxpool_kernel_"](image, 2),
                                  image.reshape(2, 3, 2, 3, 2).max(axis=(2, 4)))


@pytest.mark.parametrize(("name", "transposed"), [("mm-nl-spmd.py", False), ("mm-nisa-spmd.py", True)])
def test_sdk_spmd_matmul_examples(name, transposed):
    a = normal(128, 512) if transposed else normal(512, 128)
    b = normal(128, 1024)
    expected = (a.T if transposed else a) @ b
    got = _example(name)["matmul_128x128x512_spmd"][4, 2](a, b)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("name", "printed"), [
    ("getting_started_baremetal.py", "[[2. 2. 2.]"),  # ones + ones, printed by the script
    ("prof-kernel-benchmark.py", "predicted latency"), ("prof-kernel-profile.py", "predicted latency")])
def test_sdk_getting_started_and_benchmark_scripts(name, printed, monkeypatch):
    monkeypatch.setattr(sys, "argv", [name])
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        runpy.run_path(str(SDK_EXAMPLES / name), run_name="__main__")
    assert printed in output.getvalue()


def test_reference_allocated_sd_attention():
    """reference/allocated_attention.py: softmax(0.125 * Q.T @ K) @ V with bf16 matmuls, tiles placed
    with ncc.sbuf/psum.mod_alloc (placement stays trnsim's)."""
    sys.path.insert(0, str(SAMPLES_SRC))
    try:
        from nki_samples.reference import allocated_attention
    finally:
        sys.path.remove(str(SAMPLES_SRC))
    q, k = (normal(1, 128, 1024) / 4 for _ in range(2))
    v = normal(1, 1024, 128)
    scores = np.einsum("bdq,bdk->bqk", q, k) * 0.125
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    expected = np.einsum("bqk,bkd->bdq", probs / probs.sum(-1, keepdims=True), v)
    got = allocated_attention.allocated_fused_self_attn_for_SD_small_head_size(q, k, v)
    assert np.abs(got - expected).max() <= 1e-2 * np.abs(expected).max()


def test_reference_resize_nearest():
    """vision.py's nearest resize: a DMA gather with an index tile computed on chip (int / int is a
    true division there, as in numpy), the last partial tile masked."""
    sys.path.insert(0, str(SAMPLES_SRC))
    try:
        from nki_samples.reference import vision
    finally:
        sys.path.remove(str(SAMPLES_SRC))
    image = normal(1, 30, 20, 16)
    rows, cols = (np.floor(np.arange(n) * (size / n)).astype(int) for n, size in ((59, 30), (38, 20)))
    np.testing.assert_array_equal(vision.resize_nearest_fixed_dma_kernel(image, (1, 59, 38, 16)),
                                  image[:, rows][:, :, cols])


SAMPLES_UNIT = ROOT / "nki-samples" / "test" / "unit"
UNIT_FILES = ["test_adaptive_avg_pool2d.py", "test_resize_nearest.py", "test_rmsnorm_qkv.py",
              "test_SD_attention_small_head.py", "test_allocated_SD_attention_small_head.py",
              "test_flash_attn_fwd.py"]
SLOW_UNIT_FILES = ["test_flash_attn_bwd.py", "test_select_and_scatter.py"]  # minutes per case


@pytest.mark.parametrize("name", [*UNIT_FILES,
                                  *(pytest.param(n, marks=pytest.mark.slow) for n in SLOW_UNIT_FILES)])
def test_samples_unit_tests_in_simulation(name, tmp_path):
    """nki-samples' own pytest files for its reference kernels, run as its README says
    (`pytest --simulation-only`), in a child process with `neuronxcc.nki` aliased to trnsim."""
    import subprocess
    plugin = "import trnsim.nki.compat\ntrnsim.nki.compat.enable_legacy()\n"
    (tmp_path / "legacy_aliases.py").write_text(plugin)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SAMPLES_SRC)])}
    run = subprocess.run([sys.executable, "-m", "pytest", str(SAMPLES_UNIT / name), "--simulation-only",
                          "-p", "legacy_aliases", "-q", "-p", "no:cacheprovider", "-W", "ignore"],
                         cwd=SAMPLES_UNIT.parent.parent, env=environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]
