"""The old-API front end on kernels written here: values, bit-identity with the 0.6 API, errors."""

import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim.config
import trnsim.nki as nki06
import trnsim.nki.compat as compat
import trnsim.nki.isa as nisa06
import trnsim.nki.language as nl06
import trnsim.nki.legacy as nki
from trnsim.errors import ArgumentError, HazardError, TrnsimError, UnsupportedError
from trnsim.timing.schedule import schedule

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(0)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@nki.jit
def add_tiles(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(512)[None, :]
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128 + i_p, i_f])
        y = nl.load(b[i * 128 + i_p, i_f])
        nl.store(out[i * 128 + i_p, i_f], value=x + y)
    return out


@nki.jit
def masked_square(a):
    """Rows beyond a.shape[0] are masked out: a 200-row input in 128-row tiles."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(a.shape[1])[None, :]
    for i in nl.affine_range((a.shape[0] + 127) // 128):
        rows = i * 128 + i_p < a.shape[0]
        x = nl.load(a[i * 128 + i_p, i_f], mask=rows)
        nl.store(out[i * 128 + i_p, i_f], value=nl.square(x, mask=rows), mask=rows)
    return out


@nki.jit
def matmul_old(lhs_t, rhs):
    """out[M, N] = lhs_t[K, M].T @ rhs[K, N], K in 128-row steps accumulated in PSUM."""
    k, m = lhs_t.shape
    out = nl.ndarray((m, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((m, rhs.shape[1]), nl.float32, buffer=nl.psum)
    grid = nl.mgrid[0:128, 0:m]
    for i_k in nl.affine_range(k // 128):
        stationary = nl.load(lhs_t[i_k * 128 + grid.p, grid.x])
        moving = nl.load(rhs[i_k * 128:(i_k + 1) * 128, :])
        acc += nisa.nc_matmul(stationary, moving)
    nl.store(out, value=acc)
    return out


@nki06.jit
def matmul_new(lhs_t, rhs):
    k, m = lhs_t.shape
    out = nl06.ndarray((m, rhs.shape[1]), nl06.float32, buffer=nl06.shared_hbm)
    acc = nl06.zeros((m, rhs.shape[1]), nl06.float32, buffer=nl06.psum)
    for i_k in nl06.affine_range(k // 128):
        stationary = nl06.load(lhs_t[i_k * 128:(i_k + 1) * 128, :])
        moving = nl06.load(rhs[i_k * 128:(i_k + 1) * 128, :])
        nisa06.nc_matmul(acc, stationary, moving, accumulate=True)
    staged = nl06.ndarray(acc.shape, nl06.float32)
    nisa06.tensor_copy(dst=staged, src=acc, engine=nisa06.engine.vector)
    nl06.store(out, staged)
    return out


@nki.jit
def softmax_old(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    shifted = nl.exp(nl.subtract(tile, nl.max(tile, axis=1)))
    nl.store(out, value=nl.divide(shifted, nl.sum(shifted, axis=1)))
    return out


@nki06.jit
def softmax_new(x):
    out = nl06.ndarray(x.shape, x.dtype, buffer=nl06.shared_hbm)
    tile = nl06.load(x)
    shifted = nl06.exp(nl06.subtract(tile, nl06.max(tile, axis=1, keepdims=True)))
    nl06.store(out, nl06.divide(shifted, nl06.sum(shifted, axis=1, keepdims=True)))
    return out


def test_arange_tiles_add():
    a, b = normal(256, 512), normal(256, 512)
    np.testing.assert_array_equal(add_tiles(a, b), a + b)


def test_mask_leaves_rows_outside_unread_and_unwritten():
    a = normal(200, 64)
    np.testing.assert_array_equal(masked_square(a), np.square(a))


def test_matmul_is_bit_identical_to_the_same_kernel_in_the_new_api():
    lhs_t, rhs = normal(384, 128), normal(384, 512)
    old = matmul_old(lhs_t, rhs)
    np.testing.assert_array_equal(old, nki06.simulate(matmul_new)(lhs_t, rhs))
    np.testing.assert_allclose(old, lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)


def test_softmax_is_bit_identical_to_the_same_kernel_in_the_new_api():
    x = normal(128, 256)
    np.testing.assert_array_equal(softmax_old(x), nki06.simulate(softmax_new)(x))


def test_partition_and_free_broadcasting():
    @nki.jit
    def outer_sum(col, row):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(col), nl.load(row)))
        return out
    col, row = normal(128, 1), normal(1, 512)
    np.testing.assert_array_equal(outer_sum(col, row), col + row)


def test_a_partition_broadcast_operand_is_timed_as_the_0_6_apis_broadcast_copy():
    """The old compiler made a [1, F] tile read on 128 partitions into a tile of its own (on the
    Tensor Engine): the old API's `row.broadcast_to(...)` operand gives the 0.6 API's trace."""
    @nki.jit
    def scale_rows_old(x, row):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        r = nl.load(row)
        nl.store(out, value=nisa.tensor_tensor(nl.load(x), r.broadcast_to(x.shape), op=nl.multiply))
        return out

    @nki06.jit
    def scale_rows_new(x, row):
        out = nl06.ndarray(x.shape, dtype=x.dtype, buffer=nl06.shared_hbm)
        t, r = (nl06.ndarray(a.shape, dtype=a.dtype, buffer=nl06.sbuf) for a in (x, row))
        nisa06.dma_copy(dst=t, src=x)
        nisa06.dma_copy(dst=r, src=row)
        result = nl06.ndarray(x.shape, dtype=x.dtype, buffer=nl06.sbuf)
        nisa06.tensor_tensor(dst=result, data1=t, data2=nl06.broadcast_to(r, x.shape), op=nl06.multiply)
        nisa06.dma_copy(dst=out, src=result)
        return out

    x, row = normal(128, 512), normal(1, 512)
    np.testing.assert_array_equal(scale_rows_old(x, row), x * row)
    specs = (nki06.TensorSpec(x.shape, "float32"), nki06.TensorSpec(row.shape, "float32"))
    old, new = nki06.trace(scale_rows_old, *specs), nki06.trace(scale_rows_new, *specs)
    assert [i.opcode for i in old] == [i.opcode for i in new]
    assert schedule(old, "trn1").latency_s == schedule(new, "trn1").latency_s


def test_block_tensor_larger_than_psum_runs_block_by_block():
    """16 PSUM blocks of [128, 512] fp32 (128 KiB a partition, PSUM has 16 KiB), one live at a time."""
    @nki.jit
    def blocks(a):
        out = nl.ndarray((16, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((16, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        tile = nl.load(a)
        for i in nl.affine_range(16):
            acc[i] = nisa.nc_matmul(tile[:, 0:128], tile)
            nl.store(out[i], value=acc[i])
        return out
    a = normal(128, 512)
    expected = np.broadcast_to(a[:, :128].T @ a, (16, 128, 512))
    np.testing.assert_allclose(blocks(a), expected, rtol=1e-4, atol=1e-3)


def test_iota_from_an_index_expression():
    @nki.jit
    def ramp(a):
        out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
        expr = nl.arange(128)[:, None] * 64 + nl.arange(64)[None, :]
        nl.store(out, value=nisa.iota(expr, dtype=nl.int32))
        return out
    np.testing.assert_array_equal(ramp(np.zeros(1, np.float32)), np.arange(128 * 64).reshape(128, 64))


def test_benchmark_mode_reports_the_timing_model_latency(capsys):
    bench = nki.benchmark(warmup=5, iters=10)(matmul_old)
    bench(normal(256, 128), normal(256, 512))
    latency = bench.benchmark_result.nc_latency.get_latency_percentile(99)
    assert latency > 0
    assert "predicted latency" in capsys.readouterr().out


def test_tensor_specs_are_traced_without_values():
    spec = nki.typing.tensor[[256, 128], nl.bfloat16]
    bench = nki.benchmark(matmul_old)
    assert bench(spec, nki.typing.tensor[[256, 512], nl.bfloat16]) is not None
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0


def test_out_of_bounds_index_names_the_kernel_line():
    @nki.jit
    def too_far(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        nl.store(out[i_p, i_f], value=nl.load(a[i_p + 1, i_f]))
        return out
    with pytest.raises(HazardError, match=r"test_legacy_front_end.py:\d+ in too_far: nl.load: index 128 "
                                          r"is out of bounds for dim 0"):
        too_far(normal(128, 64))


def test_triangular_mask_is_refused_by_name():
    @nki.jit
    def triangle(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(128)[None, :]
        nl.store(out[i_p, i_f], value=nl.load(a[i_p, i_f]), mask=i_f <= i_p)
        return out
    with pytest.raises(UnsupportedError, match=r"in triangle: nl.store: mask= that is not a rectangle"):
        triangle(normal(128, 128))


def test_every_error_is_a_trnsim_error():
    @nki.jit
    def too_wide(a):
        return nl.ndarray((256, 4), dtype=nl.float32)  # 256 partitions
    with pytest.raises(TrnsimError, match="too_wide"):
        too_wide(normal(1, 1))


def test_static_cast_outside_a_kernel_casts_numpy():
    assert nl.static_cast(np.ones(3), nl.bfloat16).dtype.name == "bfloat16"


def test_enable_legacy_maps_neuronxcc_and_leaves_nki_alone():
    import trnsim.nki.language
    try:
        compat.enable_legacy()
        import neuronxcc.nki.language as old_nl
        import nki.language as new_nl
        assert old_nl is nki.language and new_nl is trnsim.nki.language
    finally:
        compat.disable()
    assert "neuronxcc" not in sys.modules


def test_psum_accumulation_starts_a_fresh_tile_and_adds_onto_zeros():
    """`acc += nc_matmul(...)`: onto a fresh PSUM tile the group starts (accumulate=None), then
    adds (accumulate=True); onto nl.zeros it adds. Decided at issue time, so every mode agrees."""
    @nki.jit
    def twice(a, zeroed):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum) if zeroed else \
            nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        tile = nl.load(a)
        for _ in nl.affine_range(2):
            acc += nisa.nc_matmul(tile[:, 0:128], tile)
        nl.store(out, value=acc)
        return out
    a = normal(128, 512)
    for zeroed, first in ((False, None), (True, True)):
        np.testing.assert_allclose(twice(a, zeroed), 2 * (a[:, :128].T @ a), rtol=1e-4, atol=1e-3)
        flags = [i.param("accumulate") for i in twice.last_trace if i.opcode.name == "MATMUL"]
        assert flags == [first, True]


def test_example_is_bit_identical_to_the_0_6_blocked_matmul():
    import pathlib

    import ml_dtypes
    examples = str(pathlib.Path(__file__).resolve().parents[3] / "examples")
    sys.path.insert(0, examples)
    try:
        with compat.enabled(legacy=True):
            import legacy_matmul
        import matmul
    finally:
        sys.path.remove(examples)
    lhs_t = rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((256, 1024)).astype(ml_dtypes.bfloat16)
    old = nki06.simulate(legacy_matmul.legacy_matmul_blocked, target="trn2")(lhs_t, rhs)
    new = nki06.simulate(matmul.matmul_blocked, target="trn2")(lhs_t, rhs)
    np.testing.assert_array_equal(old.view(np.uint16), new.view(np.uint16))
    with trnsim.config.override(eager=True):  # `acc +=` adds onto its chain's tile: the same bits
        eager = nki06.simulate(legacy_matmul.legacy_matmul_blocked, target="trn2")(lhs_t, rhs)
    np.testing.assert_array_equal(eager.view(np.uint16), old.view(np.uint16))


def test_masked_reduction_fills_the_rows_the_mask_keeps():
    @nki.jit
    def row_max(a):
        out = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(a.shape[1])[None, :]
        for i in nl.affine_range(2):
            rows = i * 128 + i_p < a.shape[0]
            tile = nl.load(a[i * 128 + i_p, i_f], mask=rows)
            peak = nl.max(tile, axis=[1], keepdims=True, mask=rows)
            nl.store(out[i * 128 + i_p, nl.arange(1)[None, :]], value=peak, mask=rows)
        return out
    a = normal(200, 64)
    np.testing.assert_array_equal(row_max(a), a.max(axis=1, keepdims=True))


def test_a_tile_value_offsets_an_index_at_run_time():
    """`src[i_p, offsets[0, i] + i_f]`: the offset is read from the tile when the kernel gets there."""
    @nki.jit
    def gather_columns(src, offsets):
        out = nl.ndarray((128, 4), dtype=src.dtype, buffer=nl.shared_hbm)
        table, where = nl.load(src), nl.load(offsets)
        picked = nl.ndarray((128, 4), dtype=src.dtype)
        i_p, i_f = nl.mgrid[0:128, 0:1]
        for i in nl.affine_range(4):
            picked[i_p, i + i_f] = nisa.tensor_copy_dynamic_src(table[i_p, where[0, i] + i_f])
        nl.store(out, value=picked)
        return out
    src, offsets = normal(128, 64), np.array([[7, 3, 60, 0]], np.int32)
    np.testing.assert_array_equal(gather_columns(src, offsets), src[:, offsets[0]])


@pytest.mark.parametrize(("body", "error", "message"), [
    ("nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.psum)", "CapacityError", "PSUM tile"),
    ("nl.load(a[nl.arange(64)[:, None] // 2, nl.arange(64)[None, :]])", "UnsupportedError", "not affine"),
    ("nl.load(a[nl.arange(64)[:, None], nl.arange(64)[None, :]], mask=nl.arange(64)[:, None] % 2 == 0)",
     "UnsupportedError", "non-contiguous"),
])
def test_old_api_error_cases_name_the_kernel_line(body, error, message):
    import trnsim.errors
    namespace = {"nl": nl, "nki": nki}
    exec(f"@nki.jit\ndef broken(a):\n    {body}\n    return a\n", namespace)  # noqa: S102 - one kernel per case
    with pytest.raises(getattr(trnsim.errors, error), match=rf"<string>:3 in broken: .*{message}"):
        namespace["broken"](normal(64, 64))


def test_integer_division_is_true_division():
    @nki.jit
    def halves(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a) / 2)
        return out
    a = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)
    np.testing.assert_array_equal(halves(a), a / 2)


def test_an_unknown_keyword_is_refused_not_ignored():
    """nisa.activation(..., sacle=2.0) ran as if scale were 1: every old call ended in **kwargs."""
    @nki.jit
    def misspelt(x):
        return nisa.activation(op=nl.exp, data=nl.load(x), sacle=2.0)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'sacle'"):
        misspelt(normal(128, 4))


def test_bn_stats_over_a_masked_last_chunk():
    """The SDK's layernorm v2 masks the partial last chunk of a row: that was refused."""
    @nki.jit
    def stats(x):
        i_p, i_f = nl.arange(128)[:, None], nl.arange(512)[None, :]
        tile = nl.load(x)
        out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        chunk = nisa.bn_stats(tile[i_p, 512 + i_f], mask=(512 + i_f < 600), dtype=nl.float32)
        nl.store(out, nisa.bn_aggr(chunk))
        return out
    x = normal(128, 1024)
    mean_var = stats(x)
    np.testing.assert_allclose(mean_var[:, 0], x[:, 512:600].mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean_var[:, 1], x[:, 512:600].var(axis=1), rtol=1e-4, atol=1e-6)


def test_python_operators_and_mixed_dtypes_on_tiles():
    """abs(t), 2.0 ** t, t % 2.0 and ~(t > 0) raised raw TypeErrors; int32 + float32 asked for a
    float64 tile."""
    @nki.jit
    def operators(x, n):
        t = nl.load(x)
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, abs(t) + 2.0 ** t + t % 2.0 + nl.load(n) + ~(t > 0))
        return out
    x = np.linspace(-2, 2, 512, dtype=np.float32).reshape(128, 4)
    n = np.arange(512, dtype=np.int32).reshape(128, 4)
    expected = np.abs(x) + 2.0 ** x + np.mod(x, 2.0) + n + (x <= 0)
    np.testing.assert_allclose(operators(x, n), expected, rtol=1e-5, atol=1e-5)


def test_a_nan_index_offset_is_a_kernel_error():
    @nki.jit
    def offset_by(x, offsets):
        t = nl.load(offsets)
        return nl.load(x[0:1, t[0, 0] + nl.arange(4)[None, :]])
    with pytest.raises(HazardError, match="holds nan"):
        offset_by(normal(1, 8), np.full((1, 1), np.nan, np.float32))


def test_a_masked_reduction_that_keeps_one_column_keeps_its_shape():
    """With mask i_f < 1 the reduced dim was taken for a kept one: a [128, 64] result."""
    @nki.jit
    def first_column_sum(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nl.store(out, nl.sum(nl.load(x), axis=1, keepdims=True, mask=(i_f < 1)))
        return out
    x = normal(128, 64)
    np.testing.assert_array_equal(first_column_sum(x), x[:, :1])


def test_a_number_stored_into_hbm_fills_it():
    """nl.store(hbm, value=3.0) was refused as a memset of HBM (the docstring allows a number)."""
    @nki.jit
    def fill(x):
        out = nl.ndarray((300, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=3.0)
        return out
    np.testing.assert_array_equal(fill(normal(1, 1)), np.full((300, 4), 3.0, np.float32))


def test_a_masked_tensor_reduce_reduces_the_rectangle_the_mask_keeps():
    """A mask that left iterations out was refused (UnsupportedError)."""
    @nki.jit
    def masked_max(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        peak = nisa.tensor_reduce(np.max, nl.load(x), axis=1, keepdims=True, mask=(i_f < 40) & (i_p < 100))
        nl.store(out[i_p[:, :1], 0], peak, mask=(i_p[:, :1] < 100))
        return out
    x = normal(128, 64)
    np.testing.assert_array_equal(masked_max(x)[:100], x[:100, :40].max(axis=1, keepdims=True))


def test_a_masked_transpose_transposes_the_rectangle_the_mask_keeps():
    """A mask that left rows out was refused (UnsupportedError)."""
    @nki.jit
    def first_rows_transposed(x):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        flipped = nisa.nc_transpose(nl.load(x), mask=(i_p < 100))
        out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        j_p, j_f = nl.mgrid[0:64, 0:128]
        nl.store(out[j_p, j_f], nl.copy(flipped, mask=(j_f < 100)), mask=(j_f < 100))
        return out
    x = normal(128, 64)
    np.testing.assert_array_equal(first_rows_transposed(x)[:, :100], x[:100].T)


def test_masked_find_index8_and_match_replace8_work_on_the_rectangle_the_mask_keeps():
    """max8's mask was honoured but nc_find_index8's and nc_match_replace8's were refused
    (UnsupportedError); indices count from the rectangle's first column."""
    @nki.jit
    def top8(x):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        tile = nl.load(x)
        keep = (i_p < 96) & (i_f < 40)
        peaks = nisa.max8(src=tile[i_p, i_f], mask=keep)
        where = nisa.nc_find_index8(data=tile[i_p, i_f], vals=peaks, mask=keep)
        replaced = nisa.nc_match_replace8(data=tile[i_p, i_f], vals=peaks, imm=-1.0, mask=keep)
        index_out = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        values_out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(index_out, where)
        nl.store(values_out[i_p, i_f], replaced, mask=keep)
        return index_out, values_out
    x = rng.permutation(128 * 64).reshape(128, 64).astype(np.float32)  # no ties
    index, values = top8(x)
    expected_index = np.argsort(-x[:96, :40], axis=1)[:, :8]
    np.testing.assert_array_equal(index[:96], expected_index)
    expected = x[:96, :40].copy()
    np.put_along_axis(expected, expected_index, -1.0, axis=1)
    np.testing.assert_array_equal(values[:96, :40], expected)


@pytest.mark.parametrize(("dtype", "operand", "expected_dtype", "expected"), [
    (np.int32, 1.5, np.float32, 4.5),        # a Python float is float32: int32 + 1.5 stayed int32 (4)
    (np.int8, 100, np.int32, 103),           # a Python int is int32: int8 + 100 saturated to 127
    (np.float16, 1.5, np.float32, 4.5),      # (float16, 1.2) -> float32 in the SDK's examples
    (np.int8, np.int8(2), np.int8, 5),       # a typed numpy scalar keeps its dtype
])
def test_a_python_number_counts_as_the_widest_type_of_its_kind(dtype, operand, expected_dtype, expected):
    """SDK 2.26 nki.api.shared, "Weakly Typed Scalar Type Inference"."""
    @nki.jit
    def plus(a):
        total = nl.load(a) + operand
        out = nl.ndarray(total.shape, dtype=total.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=total)
        return out
    result = plus(np.full((128, 4), 3, dtype))
    assert result.dtype == expected_dtype and np.all(result == expected)


@pytest.mark.parametrize(("first", "second", "expected"), [
    ("float16", "bfloat16", "float32"), ("float8_e4m3", "float8_e5m2", "bfloat16"),
    ("int32", "uint32", "float32"), ("int8", "uint8", "int16"), ("float8_e4m3", "float16", "float16"),
])
def test_two_tiles_promote_as_the_sdk_documents(first, second, expected):
    """fp16 + bf16 and e4m3 + e5m2 raised numpy's DTypePromotionError; int32 + uint32 was refused
    (SDK 2.26 nki.api.shared, "NKI Type Promotion")."""
    from trnsim.nki import dtypes

    @nki.jit
    def plus(a, b):
        total = nl.add(nl.load(a), nl.load(b))
        out = nl.ndarray(total.shape, dtype=total.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=total)
        return out
    a, b = (np.ones((128, 4), dtypes.dtype(name).numpy) for name in (first, second))
    assert plus(a, b).dtype == dtypes.dtype(expected).numpy


def test_floor_division_of_a_tile_is_refused_at_the_kernel_line():
    """`tile // 2` was Python's own TypeError, with no kernel line."""
    @nki.jit
    def halves(a):
        return nl.load(a) // 2
    with pytest.raises(UnsupportedError, match=r"test_legacy_front_end.py:\d+ in halves: .*`//` on a tile"):
        halves(normal(128, 4))


@nki.jit
def dropout_to_bf16(a):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.dropout(nl.load(a), 0.0, dtype=nl.bfloat16))
    return out


def test_dropout_with_another_dtype_drops_then_casts():
    """The old API documents dropout's dtype= as a cast; the dropout itself keeps data's dtype."""
    a = normal(128, 64).astype(ml_dtypes.bfloat16).astype(np.float32)
    result = nki06.simulate(dropout_to_bf16, target="trn2")(a)
    np.testing.assert_array_equal(np.asarray(result).astype(np.float32), a)


@nki.jit
def returns_its_tile(a):
    return nl.load(a)


def test_a_returned_tiles_store_names_the_kernels_file():
    """A legacy kernel's body runs inside a wrapper in trnsim (legacy/launch.py); a launch made from
    the wrapper registered that file as kernel code, and the store of a returned tile then named
    launch.py instead of the kernel's file."""
    returns_its_tile.with_schedule([])
    returns_its_tile(normal(128, 64))
    assert {ins.where.file for ins in returns_its_tile.last_trace} == {__file__}
