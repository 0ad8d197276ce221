"""Old-API kernels whose Python meant something the front end got wrong or passed over silently."""

import numpy as np
import pytest

import trnsim.config
import trnsim.nki.legacy as nki
from trnsim.errors import ArgumentError, KernelError, KernelWarning, ShapeError, UnsupportedError

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(1)
LINE = r"test_legacy_kernel_semantics.py:\d+ in "


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def stored(body):
    """A kernel storing `body(tiles...)` (each argument loaded whole) into a new HBM tensor."""
    @nki.jit
    def kernel(*arrays):
        result = body(*(nl.load(a) for a in arrays))
        out = nl.ndarray(result.shape, dtype=result.dtype, buffer=nl.shared_hbm)
        nl.store(out, result)
        return out
    return kernel


def test_python_and_on_a_mask_warns_and_keeps_pythons_meaning():
    """`mask=(a and b)` was read as `b` with no word; Python takes a predicate's truth value (True),
    as the SDK's nc_match_replace8 test relies on. It now warns at the line (strict mode refuses)."""
    @nki.jit
    def masked(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, 0.0)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        nl.store(out[i_p, i_f], nl.load(a[i_p, i_f]), mask=(i_p < 64 and i_f < 32))
        return out
    a = normal(128, 64)
    with pytest.warns(KernelWarning, match=LINE + r"masked: Python `and`.*combine masks with &"):
        result = masked(a)
    np.testing.assert_array_equal(result[:, :32], a[:, :32])
    with trnsim.config.override(strict=True), pytest.raises(ShapeError, match=LINE + "masked"):
        masked(a)


def test_loop_reduce_assigned_by_name_reduces_into_that_tile():
    """`b = nl.loop_reduce(x, np.add, [k])`, as the SDK's docstring writes it, gave the last x."""
    @nki.jit
    def total(a):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        b = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(4):
            b = nl.loop_reduce(nl.load(a[k * 128:(k + 1) * 128, :]), op=np.add,
                               loop_indices=[k], dtype=nl.float32)
        nl.store(out, b)
        return out
    a = normal(512, 64)
    np.testing.assert_allclose(total(a), a.reshape(4, 128, 64).sum(0), rtol=1e-5, atol=1e-5)


def test_psum_accumulation_after_the_tile_was_read_adds():
    """`acc += nc_matmul` after acc was stored restarted the group and overwrote acc."""
    @nki.jit
    def twice(s, m):
        out = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        acc[...] = nisa.nc_matmul(nl.load(s), nl.load(m))
        nl.store(out[0], acc)
        acc += nisa.nc_matmul(nl.load(s), nl.load(m))
        nl.store(out[1], acc)
        return out
    s, m = normal(128, 128), normal(128, 128)
    np.testing.assert_allclose(twice(s, m), np.stack([s.T @ m, 2 * (s.T @ m)]), rtol=1e-4, atol=1e-3)


def test_a_masked_result_written_whole_afterwards_is_copied_whole():
    """The masked load's rectangle (rows 0-63) stuck to the tile: `y[...] = x` copied only those."""
    @nki.jit
    def completed(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        x = nl.load(a[i_p, i_f], mask=(i_p < 64))
        x[64:128, :] = nl.load(b[64:128, :])
        y = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        y[...] = x
        nl.store(out, y)
        return out
    a, b = normal(128, 64), normal(128, 64)
    np.testing.assert_array_equal(completed(a, b), np.concatenate([a[:64], b[64:]]))


def test_where_promotes_an_int_tile_and_a_python_float_to_float32():
    """nl.where(int32 > 0, int32, 1.5) gave int32 (1.5 rounded to 2)."""
    x = np.arange(-256, 256, dtype=np.int32).reshape(128, 4)
    result = stored(lambda t: nl.where(t > 0, t, 1.5))(x)
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, np.where(x > 0, x, 1.5))


def test_tile_equality_and_shifts_are_the_nl_calls():
    """`==` / `!=` gave Python bools; `<<`, `>>` and reflected `1 & x` raised raw TypeErrors."""
    x = np.arange(512, dtype=np.int32).reshape(128, 4)
    y = x.copy()
    y[::2] += 1
    result = stored(lambda a, b: nl.where(a == b, 1, 0) + nl.where(a != b, 10, 0) + (a << 2) + (a >> 1)
                    + (1 & a) + (2 | a) + (3 ^ a))(x, y)
    expected = np.where(x == y, 1, 10) + (x << 2) + (x >> 1) + (1 & x) + (2 | x) + (3 ^ x)
    np.testing.assert_array_equal(result, expected)


def test_a_tile_has_no_truth_value():
    """`if tile > x:` was always taken (a tile was truthy through its length)."""
    @nki.jit
    def branches(a):
        t = nl.load(a)
        return t if t > 1e9 else t * 2
    with pytest.raises(ArgumentError, match=LINE + "branches: a tile has no truth value"):
        branches(normal(128, 4))


def test_an_hbm_argument_is_true_as_any_object():
    """`nl.load(imm1) if imm1 else None` (the SDK's tensor_scalar_cumulative test) asks whether an
    optional argument was given; it was refused like `if tile > x:`."""
    @nki.jit
    def optional_bias(a, bias=None):
        t = nl.load(a)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, t + nl.load(bias) if bias else t)
        return out
    a, b = normal(128, 4), normal(128, 4)
    np.testing.assert_array_equal(optional_bias(a, b), a + b)
    np.testing.assert_array_equal(optional_bias(a), a)


@pytest.mark.parametrize(("body", "error", "message"), [
    ("nl.load(a[nl.arange(64)[:, None], nl.arange(64)[None, :], 999])", ShapeError,
     "3 indices for a tensor of 2 dims"),
    ("nl.load(b[nl.arange(64)[:, None], 0:4, nl.arange(16)[None, :]])", ShapeError, "do not broadcast"),
    ("nl.sum(nl.load(a), axis=0)", ShapeError, "partition dim"),
    ("nl.affine_range(1, unroll_factr=2)", ArgumentError, "unexpected keyword argument 'unroll_factr'"),
    ("nl.ndarray((2, nl.par_dim(64), 4), dtype=nl.float32)[0:1]", UnsupportedError, "block dims"),
])
def test_kernel_mistakes_are_refused_at_their_line(body, error, message):
    """Each ran (extra keys and unknown keywords dropped, axis 0 reduced) or raised a raw error."""
    namespace = {"nl": nl, "nki": nki}
    exec(f"@nki.jit\ndef broken(a, b):\n    {body}\n    return a\n", namespace)  # noqa: S102 - one kernel a case
    with pytest.raises(error, match=rf"<string>:3 in broken: .*{message}"):
        namespace["broken"](normal(64, 64), normal(64, 4, 16))


def test_a_missing_tile_attribute_names_the_kernel_line():
    """`t.T` raised NkiTensor's AttributeError from inside trnsim (old-API tiles have no `.T`); it
    stays an AttributeError, as hasattr() needs."""
    @nki.jit
    def transposed(a):
        return nl.load(a).T
    with pytest.raises(AttributeError, match=LINE + "transposed: an old-API tile has no attribute 'T'"):
        transposed(normal(4, 4))


@pytest.mark.parametrize("launch", [
    lambda f: nki.jit(mdoe="simulation")(f), lambda f: nki.jit(bogus_option=1)(f),
    lambda f: nki.benchmark(warmpu=5)(f), lambda f: nki.baremetal(save_nef_name="x.neff")(f),
])
def test_unknown_launcher_options_are_refused(launch):
    with pytest.raises(ArgumentError, match=LINE + r".*unknown option"):
        launch(lambda a: a)


def test_the_sdks_launcher_options_are_taken():
    for launch in (nki.benchmark(warmup=5, iters=10, save_neff_name="f.neff", save_trace_name="p.ntff"),
                   nki.baremetal(artifacts_dir="d", additional_compile_opt="-O1"),
                   nki.profile(working_directory="/tmp", profile_nth=2, num_execs=3, overwrite=False),
                   nki.jit(show_compiler_tb=True, debug_kernel=True, platform_target="trn2")):
        assert launch(lambda a: a) is not None


@pytest.mark.parametrize("grid", [2.7, True, "2", np.float64(3.0)])
def test_a_grid_that_is_not_a_whole_number_is_refused(grid):
    """kernel[2.7] ran 2 programs: sizes went through int()."""
    with pytest.raises(KernelError, match=LINE + r".*is not a number of programs"):
        stored(lambda t: t)[grid]


def test_a_masked_device_print_prints_the_rows_the_mask_keeps(capsys):
    """mask= was taken and ignored: every row printed."""
    @nki.jit
    def show(a):
        i_p = nl.arange(4)[:, None]
        nl.device_print("rows", nl.load(a), mask=(i_p < 2))
        return a
    show(np.arange(12, dtype=np.float32).reshape(4, 3))
    assert capsys.readouterr().out.split() == ["rows", "[[0.", "1.", "2.]", "[3.", "4.", "5.]]"]


def test_psum_zeros_of_block_dims_fill_each_block_when_first_used():
    """nl.zeros((16, par_dim(128), 512), psum) filled all 16 blocks (128 KiB a partition) at once."""
    @nki.jit
    def blocks(a):
        out = nl.ndarray((16, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((16, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)
        tile = nl.load(a)
        for i in nl.affine_range(16):
            acc[i] += nisa.nc_matmul(tile[:, 0:128], tile)
            nl.store(out[i], value=acc[i])
        return out
    a = normal(128, 512)
    np.testing.assert_allclose(blocks(a), np.broadcast_to(a[:, :128].T @ a, (16, 128, 512)), rtol=1e-4,
                               atol=1e-3)


def test_loop_reduce_inside_an_expression_never_reduces_into_the_assigned_name():
    """`y = nl.exp(nl.loop_reduce(...))` reduced into the tile y already held (y + x, then exp)."""
    def kernel_with(prior):
        @nki.jit
        def kernel(a):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            y = nl.full((128, 64), prior, dtype=nl.float32, buffer=nl.sbuf)
            y = nl.exp(nl.loop_reduce(nl.load(a), np.add, loop_indices=[0], dtype=nl.float32))
            nl.store(out, y)
            return out
        return kernel

    a = normal(128, 64) * 0.1
    np.testing.assert_array_equal(kernel_with(5.0)(a), kernel_with(0.0)(a))


def test_dma_transpose_to_another_dtype_transposes_then_copies():
    """The old nisa.dma_transpose(src, dtype=) was refused once dma_transpose stopped casting."""
    import ml_dtypes

    @nki.jit
    def kernel(a):
        out = nl.ndarray((64, 128), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, nisa.dma_transpose(nl.load(a), dtype=nl.bfloat16))
        return out

    a = normal(128, 64)
    np.testing.assert_array_equal(kernel(a), a.T.astype(ml_dtypes.bfloat16))


def test_dma_transpose_takes_dge_mode_as_the_sdks_tests_pass_it():
    """aws-neuron-sdk nki/test/test_nki_isa_dma_transpose.py passes dge_mode=hwdge (refused as unknown)."""
    import trnsim.nki as nki06

    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.dma_transpose(a[:, :], dge_mode=nisa.dge_mode.hwdge))
        return out

    a = rng.random((16, 128)).astype(np.float16)
    np.testing.assert_array_equal(nki06.simulate(kernel, target="trn2")(a), a.T)
