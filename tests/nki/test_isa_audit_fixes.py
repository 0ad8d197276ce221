"""nisa fixes from the ISA audit: same-dtype moves keep their bits, and the limits the NKI docstrings
state are refused (the same in simulate and trace_only)."""

import ml_dtypes
import numpy as np
import pytest
from kernel_helpers import on_chip, to_hbm

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ArgumentError, DTypeError, HazardError, KernelError, ShapeError, UnsupportedError

BIG = np.random.default_rng(0).integers(-2 ** 31, 2 ** 31 - 1, (32, 16)).astype(np.int32)


def _both(kernel, *args, target="trn2"):
    """The simulate result; trace_only must accept (or refuse) the same kernel."""
    result = nki.simulate(kernel, target=target)(*args)
    nki.trace(kernel, *[nki.TensorSpec(a.shape, str(a.dtype)) for a in args], target=target)
    return result


def _refused(error, kernel, *args, match, target="trn2"):
    with pytest.raises(error, match=r"test_isa_audit_fixes\.py:\d+ in [\w<>]+: .*" + match):
        nki.simulate(kernel, target=target)(*args)
    with pytest.raises(error, match=match):
        nki.trace(kernel, *[nki.TensorSpec(a.shape, str(a.dtype)) for a in args], target=target)


# --- HIGH: int32 data moves keep every bit -----------------------------------------------------------
def test_dma_transpose_of_int32_keeps_bits():
    def kernel(x):
        dst = nl.ndarray((16, 32), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=dst, src=x)
        return to_hbm(dst)
    np.testing.assert_array_equal(_both(kernel, BIG), BIG.T)


def test_stream_shuffle_of_int32_keeps_bits():
    mask = [(i - 1) % 32 for i in range(32)]

    def kernel(x):
        dst = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(dst=dst, src=on_chip(x), shuffle_mask=mask)
        return to_hbm(dst)
    np.testing.assert_array_equal(_both(kernel, BIG), BIG[mask])


def test_affine_select_int32_into_int32_keeps_bits():
    def kernel(x):
        dst = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.affine_select(dst=dst, pattern=[[-1, 16]], channel_multiplier=1, on_true_tile=on_chip(x),
                           on_false_value=-7.0, cmp_op=nl.greater_equal)
        return to_hbm(dst)
    keep = np.arange(32)[:, None] - np.arange(16)[None, :] >= 0
    np.testing.assert_array_equal(_both(kernel, BIG), np.where(keep, BIG, -7))


def test_dropout_at_zero_keeps_int32_bits():
    def kernel(x):
        dst = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.dropout(dst=dst, data=on_chip(x), prob=0.0)
        return to_hbm(dst)
    np.testing.assert_array_equal(_both(kernel, BIG), BIG)


# --- MEDIUM ------------------------------------------------------------------------------------------
def test_cumulative_takes_a_per_partition_imm0():
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    scale = np.arange(1, 9, dtype=np.float32).reshape(8, 1)

    def kernel(x, s):
        dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=dst, src=on_chip(x), op0=nl.multiply, op1=nl.add, imm0=on_chip(s))
        return to_hbm(dst)
    np.testing.assert_allclose(_both(kernel, x, scale), np.cumsum(x * scale, axis=1), rtol=1e-5)


def test_register_offsets_run_in_trace_and_simulate():
    def kernel(x):
        r = nisa.register_alloc(-3)
        ramp = nl.ndarray((4, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=ramp, pattern=[[1, 8]], offset=r, channel_multiplier=0)
        kept = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        ones = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        nisa.affine_select(dst=kept, pattern=[[1, 8]], channel_multiplier=0, on_true_tile=ones,
                           on_false_value=0.0, cmp_op=nl.greater_equal, offset=r)
        return to_hbm(ramp), to_hbm(kept)
    ramp, kept = _both(kernel, np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(ramp[0], np.arange(8) - 3)
    np.testing.assert_array_equal(kept[0], [0, 0, 0, 1, 1, 1, 1, 1])


def test_find_index8_pairs_repeated_vals_with_ascending_positions():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32)

    def kernel(d, v):
        dst = nl.ndarray((1, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=dst, data=on_chip(d), vals=on_chip(v))
        return to_hbm(dst)
    np.testing.assert_array_equal(_both(kernel, data, vals), [[2, 4, 5, 6, 7, 8, 9, 10]])


def test_tensor_engine_transpose_writes_psum_and_no_engine_into_sbuf_uses_vector():
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)

    def default(x):
        dst = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(dst=dst, data=on_chip(x))
        return to_hbm(dst)
    np.testing.assert_array_equal(_both(default, x), x.T)

    def on_pe(x):
        dst = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(dst=dst, data=on_chip(x), engine=nisa.tensor_engine)
        return to_hbm(dst)
    _refused(KernelError, on_pe, x, match="tensor engine this instruction takes outputs in PSUM")


# --- LOW: documented limits --------------------------------------------------------------------------
def _kernel(body):
    def kernel(x):
        body()
        return x
    return kernel


def _t(shape, dtype=nl.float32, value=0):
    tile = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
    nisa.memset(dst=tile, value=value)
    return tile


X = np.zeros((1, 1), np.float32)
BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("body, error, match, target", [
    (lambda: nisa.range_select(dst=_t((8, 8)), on_true_tile=_t((8, 8)), comp_op0=nl.greater_equal,
                               comp_op1=nl.less, bound0=_t((8, 1)), bound1=_t((8, 1))),
     UnsupportedError, "generation 3", "trn1"),
    (lambda: nisa.range_select(dst=_t((8, 8)), on_true_tile=_t((8, 8)), comp_op0=nl.add, comp_op1=nl.less,
                               bound0=_t((8, 1)), bound1=_t((8, 1))), ArgumentError, "comp_op0=", "trn2"),
    (lambda: nisa.range_select(dst=_t((8, 8)), on_true_tile=_t((8, 8)), comp_op0=nl.less, comp_op1=nl.less,
                               bound0=_t((8, 1)), bound1=_t((8, 1)), reduce_op=nl.add),
     ArgumentError, "reduce_op=", "trn2"),
    (lambda: nisa.range_select(dst=_t((8, 8)), on_true_tile=_t((8, 8)), comp_op0=nl.less, comp_op1=nl.less,
                               bound0=_t((8, 1)), bound1=_t((8, 1)), range_start=0.5),
     ArgumentError, "range_start=", "trn2"),
    (lambda: nisa.range_select(dst=_t((8, 8), nl.int32), on_true_tile=_t((8, 8), nl.int32),
                               comp_op0=nl.less, comp_op1=nl.less, bound0=_t((8, 1)), bound1=_t((8, 1))),
     DTypeError, "on_true_tile is int32", "trn2"),
    (lambda: nisa.max8(dst=_t((4, 8)), src=_t((4, 16385))), ShapeError, "8 to 16384", "trn2"),
    (lambda: nisa.nc_find_index8(dst=_t((4, 8), nl.uint32), data=_t((4, 16385)), vals=_t((4, 8))),
     ShapeError, "8 to 16384", "trn2"),
    (lambda: nisa.dma_transpose(dst=_t((16, 8), nl.float32), src=_t((8, 16), BF16)), DTypeError,
     "does not cast", "trn2"),
    (lambda: nisa.dma_transpose(dst=_t((4, 16, 8), BF16), src=_t((4, 8, 16), BF16), axes=(0, 2, 1)),
     ShapeError, "supports", "trn2"),
    (lambda: nisa.dma_transpose(dst=_t((16, 8), BF16), src=_t((8, 16), BF16), dge_mode=nisa.dge_mode.none),
     ArgumentError, "dge_mode=none", "trn2"),
    (lambda: nisa.dma_transpose(dst=_t((16, 16)), src=_t((16, 16)), dge_mode=nisa.dge_mode.hwdge),
     DTypeError, "2-byte", "trn2"),
    (lambda: nisa.dma_transpose(dst=_t((16, 8), BF16), src=_t((8, 16), BF16), dge_mode=nisa.dge_mode.hwdge),
     ShapeError, "hwdge", "trn2"),
    (lambda: nisa.rng(dst=_t((8, 8), nl.uint32), engine=nisa.gpsimd_engine), UnsupportedError,
     "NeuronCore-v3", "trn1"),
    (lambda: nisa.activation_reduce(dst=_t((8, 8)), op=nl.exp, data=_t((8, 8)), reduce_op=nl.maximum,
                                    reduce_res=_t((8, 1))), UnsupportedError, "add only", "trn1"),
    (lambda: nisa.select_reduce(dst=_t((8, 8)), predicate=_t((8, 8)), on_true=_t((8, 8)), on_false=0.0),
     DTypeError, "integer predicate", "trn2"),
    (lambda: nisa.select_reduce(dst=_t((8, 8), nl.int32), predicate=_t((8, 8), nl.uint8),
                                on_true=_t((8, 8), nl.int32), on_false=0.0),
     DTypeError, "on_true is int32", "trn2"),
    (lambda: nisa.nc_n_gather(dst=_t((8, 4)), data=_t((8, 8)), indices=_t((8, 4), nl.int16)), DTypeError,
     "uint32 indices", "trn2"),
    (lambda: nisa.nc_n_gather(dst=_t((8, 4), nl.float16), data=_t((8, 8)), indices=_t((8, 4), nl.uint32)),
     DTypeError, "does not cast", "trn2"),
    (lambda: nisa.tensor_partition_reduce(dst=_t((1, 8)), op=nl.minimum, data=_t((8, 8))), ArgumentError,
     "op='minimum'", "trn2"),
    (lambda: nisa.iota(dst=_t((4, 32), nl.int32), pattern=[[1, 2]] * 5), ShapeError, "up to 4", "trn2"),
    (lambda: nisa.iota(dst=_t((4, 8), nl.int32), pattern=[[1, 8]], offset=2 ** 40), ArgumentError, "offset=",
     "trn2"),
    (lambda: nisa.affine_select(dst=_t((4, 8)), pattern=[[1, 8]], channel_multiplier=0,
                                on_true_tile=_t((4, 8)), on_false_value=0.0, offset=-2.5),
     ArgumentError, "offset=-2.5", "trn2"),
    (lambda: nisa.scalar_tensor_tensor(dst=_t((8, 8), nl.int32), data=_t((8, 8), nl.int32),
                                       op0=nl.bitwise_and, operand0=1, op1=nl.add,
                                       operand1=_t((8, 8), nl.int32)),
     ArgumentError, "op0=bitwise_and", "trn2"),
    (lambda: nisa.tensor_scalar_cumulative(dst=_t((8, 8)), src=_t((8, 8)), op0=nl.bitwise_and, op1=nl.add,
                                           imm0=1.0), ArgumentError, "op0=bitwise_and", "trn2"),
    (lambda: nisa.tensor_scalar_cumulative(dst=_t((8, 8), nl.int32), src=_t((8, 8), nl.int32), op0=nl.add,
                                           op1=nl.add, imm0=0.0), DTypeError, "int32", "trn2"),
    (lambda: nisa.tensor_scalar_reduce(dst=_t((8, 8)), data=_t((8, 8)), op0=nl.add, operand0=1.0,
                                       reduce_op=nl.add, reduce_res=_t((8, 1)), reduce_init=5.0),
     ArgumentError, "reduce_init", "trn2"),
    (lambda: nisa.exponential(dst=_t((8, 8)), src=_t((8, 8)), reduce_init=5.0), ArgumentError, "reduce_init",
     "trn3"),
    (lambda: nisa.dropout(dst=_t((8, 8), nl.float16), data=_t((8, 8)), prob=0.5), DTypeError,
     "dropout writes data's dtype", "trn2"),
    (lambda: nisa.range_select(dst=_t((8, 8)), on_true_tile=_t((8, 8)), comp_op0=nl.less, comp_op1=nl.less,
                               bound0=_t((8, 1)), bound1=_t((8, 1)), on_false_value=0.0),
     ArgumentError, "on_false_value=0.0; .* must be FP32_MIN", "trn2"),
    (lambda: nisa.tensor_scalar(dst=_t((8, 8), nl.int32), data=_t((8, 8), nl.int32), op0=nl.bitwise_and,
                                operand0=1, op1=nl.add, operand1=1),
     ArgumentError, "both bitvec or both arithmetic", "trn2"),
    (lambda: nisa.activation(dst=_t((8, 8)), op=nl.exp, data=_t((8, 8)), reduce_op=nl.maximum,
                             reduce_res=_t((8, 1)), reduce_cmd=nisa.reduce_cmd.reset_reduce),
     ArgumentError, "reduce_op=maximum; activation's reduce_op must be nl.add", "trn2"),
    (lambda: nisa.tensor_reduce(dst=_t((8, 1), nl.int32), op=nl.bitwise_or, data=_t((8, 8), nl.int32),
                                axis=1, negate=True),
     ArgumentError, "negate=True with op=bitwise_or", "trn2"),
    (lambda: nisa.affine_select(dst=_t((4, 8)), pattern=[[1, 8]], channel_multiplier=0,
                                on_true_tile=_t((4, 8)), on_false_value=0.0, cmp_op=nl.add),
     ArgumentError, r"cmp_op='add'; it must be one of \['equal', 'not_equal'", "trn2"),
])
def test_documented_limit_is_refused(body, error, match, target):
    _refused(error, _kernel(body), X, match=match, target=target)


@pytest.mark.parametrize("body, match", [
    (lambda: nisa.scalar_tensor_tensor(dst=_t((8, 8)), data=_t((8, 8)), op0=nl.add, operand0=1.0, op1=nl.add,
                                       operand1=_t((8, 8)), engine=nisa.vector_engine), "'engine'"),
    (lambda: nisa.tensor_scalar_cumulative(dst=_t((8, 8)), src=_t((8, 8)), op0=nl.add, op1=nl.add, imm0=1.0,
                                           reverse0=True), "'reverse0'"),
    (lambda: nisa.register_move(nisa.register_alloc(), imm=7), "'imm'; it takes dst, src"),
    (lambda: nisa.register_move(nisa.register_alloc()), "'src'"),
    (lambda: nisa.tensor_copy_dynamic_src(dst=_t((8, 8)), src=_t((8, 8))), "removed in NKI 0.4.0"),
])
def test_names_outside_the_sdk_signatures_are_refused(body, match):
    with pytest.raises((ArgumentError, UnsupportedError), match=match):
        nki.simulate(_kernel(body), target="trn2")(X)


def test_negative_segment_ids_are_a_hazard():
    def kernel(x):
        dst = nl.ndarray((1, 2, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=dst, segment_ids=on_chip(x))
        return to_hbm(dst)
    with pytest.raises(HazardError, match="negative"):
        nki.simulate(kernel, target="trn2")(np.array([[1, 1, -1, 2, 2, 0, 0, 0]], np.int32))


def test_iota_computes_in_int32_and_wraps():
    def kernel(x):
        dst = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=dst, pattern=[[2 ** 30, 4]], offset=2 ** 31 - 1)
        return to_hbm(dst)
    expected = ((2 ** 31 - 1 + 2 ** 30 * np.arange(4) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    np.testing.assert_array_equal(_both(kernel, X)[0], expected)


def test_load_transpose2d_to_another_dtype_transposes_then_copies():
    """dma_transpose does not cast, so nl.load_transpose2d(dtype=) was refused once it checked so."""
    @nki.jit
    def kernel(x):
        return to_hbm(nl.load_transpose2d(x, dtype=nl.bfloat16))

    x = np.random.default_rng(1).standard_normal((16, 32)).astype(np.float32)
    result = _both(kernel, x)
    assert result.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(result, x.T.astype(ml_dtypes.bfloat16))


def test_select_reduce_takes_a_bool_predicate():
    """The SDK's own select_reduce test loads an np.bool_ predicate; the integer-predicate rule refused it."""
    @nki.jit
    def kernel(predicate, on_true):
        dst = nl.ndarray(on_true.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=dst, predicate=on_chip(predicate), on_true=on_chip(on_true), on_false=-1.0)
        return to_hbm(dst)

    rng = np.random.default_rng(2)
    predicate, on_true = rng.integers(0, 2, (8, 8)).astype(np.bool_), rng.random((8, 8)).astype(np.float32)
    np.testing.assert_array_equal(_both(kernel, predicate, on_true), np.where(predicate, on_true, -1.0))


def test_a_register_moved_from_another_is_read_when_the_move_runs_in_both_modes():
    """register_move(r2, r1) read r1 when the kernel called it, so trace_only refused the kernel."""
    @nki.jit
    def kernel(a):
        tile = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
        first, second = nisa.register_alloc(5), nisa.register_alloc()
        nisa.register_move(second, first)
        nisa.iota(dst=tile, pattern=[[1, 64]], offset=second)
        return to_hbm(tile)

    result = _both(kernel, np.zeros((128, 64), np.float32))
    np.testing.assert_array_equal(result, np.broadcast_to(np.arange(5, 69, dtype=np.int32), (128, 64)))


def test_nl_dropout_with_another_dtype_drops_then_casts():
    """nl.dropout's dtype= is a cast; nisa.dropout itself keeps data's dtype (it refused this)."""
    x = np.random.default_rng(2).standard_normal((8, 16)).astype(ml_dtypes.bfloat16).astype(np.float32)

    def kernel(x):
        return to_hbm(nl.dropout(on_chip(x), 0.0, dtype=nl.bfloat16))
    result = _both(kernel, x)
    assert result.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(result.astype(np.float32), x)
