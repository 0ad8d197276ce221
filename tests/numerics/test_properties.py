"""Property checks over random shapes, axes and values (hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim.numerics import (
    PATTERNS,
    cast,
    compress,
    decompress,
    dequantize_mx,
    find_violations,
    get_pattern,
    prune,
    quantize_mx,
)

FAST = settings(max_examples=40, deadline=None)


@FAST
@given(pattern=st.sampled_from(PATTERNS), groups=st.integers(1, 4), other=st.integers(1, 5),
       axis=st.sampled_from([0, 1]), seed=st.integers(0, 2**32 - 1))
def test_prune_compress_decompress_is_exact_on_any_axis(pattern, groups, other, axis, seed):
    shape = [other, other]
    shape[axis] = groups * get_pattern(pattern).group
    w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    pruned = prune(w, pattern, axis=axis)
    assert find_violations(pruned, pattern, axis=axis) == []
    assert np.array_equal(decompress(compress(pruned, pattern, axis=axis)), pruned)
    assert np.all((pruned == 0) | (pruned == w))


@FAST
@given(fmt=st.sampled_from(["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4_e2m1", "mxint8"]),
       rule=st.sampled_from(["ocp", "round_up", "trainium"]), log2_scale=st.integers(-100, 100),
       seed=st.integers(0, 2**32 - 1))
def test_mx_round_trip_error_is_bounded_by_the_block_scale(fmt, rule, log2_scale, seed):
    x = (np.random.default_rng(seed).standard_normal((2, 64)) * 2.0**log2_scale).astype(np.float32)
    mx = quantize_mx(x, fmt, scale_rule=rule)
    back = dequantize_mx(mx)
    scale = np.repeat(np.exp2(mx.scale_exponents.astype(np.float64)), 32, axis=-1)
    # no element moves by more than the block's largest magnitude step (the clamp included)
    assert np.all(np.abs(back - x.astype(np.float64)) <= mx.format.max_element * scale * 2.0**-1)
    assert np.all(np.sign(back) * np.sign(x) >= 0)


@FAST
@given(bits=st.integers(0, 2**32 - 1), fmt=st.sampled_from(["bfloat16", "float16", "float8_e4m3",
                                                            "float8_e5m2", "float8_e3m4", "tfloat32"]))
def test_rne_result_is_never_farther_than_a_neighbour(bits, fmt):
    x = np.uint32([bits]).view(np.float32)
    if not np.isfinite(x[0]):
        return
    y = cast(x, fmt, rounding="nearest").astype(np.float64)[0]
    z = cast(x, fmt, rounding="stochastic", seed=bits).astype(np.float64)[0]
    if np.isfinite(y) and np.isfinite(z):
        assert abs(y - x[0]) <= abs(z - x[0])  # nearest is at least as near as either neighbour
