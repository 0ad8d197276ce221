"""The built-in kernels the cost library times compute what they stand for (run with values)."""

import numpy as np
import pytest

import trnsim.nki as nki
from trnsim.cost import kernels


def _attention(q, k, v, causal):
    groups, q_len, _ = q.shape
    ratio, kv_len = groups // k.shape[0], k.shape[1]
    out = np.zeros_like(q)
    for g in range(groups):
        scores = q[g] @ k[g // ratio].T
        if causal:
            allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + kv_len - q_len
            scores = np.where(allowed, scores, -np.inf)
        weights = np.exp(scores - scores.max(1, keepdims=True))
        out[g] = weights / weights.sum(1, keepdims=True) @ v[g // ratio]
    return out


@pytest.mark.parametrize(("groups", "kv_groups", "q_len", "kv_len", "depth", "causal"), [
    (2, 1, 256, 640, 64, True),     # grouped queries, queries at the end of a longer context
    (1, 1, 200, 200, 32, False),    # partial tiles
    (1, 1, 130, 700, 64, True),     # a diagonal block that starts inside a query tile
])
def test_fused_attention_kernel_matches_softmax_attention(groups, kv_groups, q_len, kv_len, depth, causal):
    rng = np.random.default_rng(0)
    q = (0.3 * rng.standard_normal((groups, q_len, depth))).astype(np.float32)
    k = rng.standard_normal((kv_groups, kv_len, depth)).astype(np.float32)
    v = rng.standard_normal((kv_groups, kv_len, depth)).astype(np.float32)
    got = nki.simulate(kernels.attention)(np.ascontiguousarray(q.transpose(0, 2, 1)),
                                          np.ascontiguousarray(k.transpose(0, 2, 1)), v, causal)
    np.testing.assert_allclose(np.asarray(got), _attention(q, k, v, causal), atol=1e-5)


def test_a_built_in_kernels_instructions_name_its_own_lines():
    """Kernel lines are found in a kernel's file, trnsim's own too: before, the search went past
    cost/kernels.py to the first file outside trnsim, the code that asked for the cost."""
    recorded = nki.trace(kernels.matmul, nki.TensorSpec((128, 128), "bfloat16"),
                         nki.TensorSpec((128, 512), "bfloat16"), target="trn2")
    assert {ins.where.file for ins in recorded} == {kernels.__file__}
    assert len({ins.where.line for ins in recorded}) > 1
