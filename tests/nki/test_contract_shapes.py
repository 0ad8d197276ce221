"""Every opcode's CHECK rule: a legal call runs, an illegal shape is refused at the kernel's line.

Each case is (name, legal, illegal, error): two one-line calls issued inside a kernel. The illegal
one must raise `error` with a message that starts with this file's name and the call's line, in
value runs and in trace-only runs alike.
"""

import os

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import config
from trnsim.core.check import CHECK
from trnsim.errors import ArgumentError, DTypeError, HazardError, KernelError, ShapeError

NAME = os.path.basename(__file__)
X = np.ones((128, 8), np.float32)


def t(*shape, dtype=nl.float32, value=1.0):
    """An initialised SBUF tile."""
    tile = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
    nisa.memset(dst=tile, value=value)
    return tile


def reg():
    return nisa.register_alloc(3)


ADD, MUL, EXP, GE, LT = nl.add, nl.multiply, nl.exp, nl.greater_equal, nl.less
I32, U32 = nl.int32, nl.uint32
CASES = [
    ("dma_copy", lambda: nisa.dma_copy(dst=t(128, 8), src=t(128, 8)),
     lambda: nisa.dma_copy(dst=t(128, 8), src=t(128, 4)), ShapeError),
    ("dma_transpose", lambda: nisa.dma_transpose(dst=t(8, 128), src=t(128, 8)),
     lambda: nisa.dma_transpose(dst=t(16, 64), src=t(128, 8)), ShapeError),
    ("dma_transpose axes", lambda: nisa.dma_transpose(dst=t(8, 128), src=t(128, 8), axes=(1, 0)),
     lambda: nisa.dma_transpose(dst=t(8, 128), src=t(128, 8), axes=(1, 1)), ShapeError),
    ("tensor_copy", lambda: nisa.tensor_copy(dst=t(128, 2, 4), src=t(128, 8)),
     lambda: nisa.tensor_copy(dst=t(128, 8), src=t(64, 8)), ShapeError),
    ("tensor_copy_predicated", lambda: nisa.tensor_copy_predicated(dst=t(128, 4), src=t(128, 4),
                                                                   predicate=t(128, 2, 2)),
     lambda: nisa.tensor_copy_predicated(dst=t(128, 4), src=t(128, 4), predicate=t(64, 8)), ShapeError),
    ("memset", lambda: nisa.memset(dst=t(128, 8), value=2.0),
     lambda: nisa.memset(dst=t(128, 8), value="2"), ArgumentError),
    ("iota", lambda: nisa.iota(dst=t(128, 8), pattern=[[1, 2], [2, 4]]),
     lambda: nisa.iota(dst=t(128, 8), pattern=[[1, 4]]), ShapeError),
    ("activation", lambda: nisa.activation(dst=t(128, 8), op=EXP, data=t(128, 8), reduce_res=t(128, 1)),
     lambda: nisa.activation(dst=t(128, 8), op=EXP, data=t(128, 8), reduce_res=t(128, 2)), ShapeError),
    ("activation_reduce", lambda: nisa.activation_reduce(dst=t(128, 8), op=EXP, data=t(128, 8),
                                                         reduce_op=ADD, reduce_res=t(128, 1)),
     lambda: nisa.activation_reduce(dst=t(128, 8), op=EXP, data=t(128, 8), reduce_op=ADD,
                                    reduce_res=t(64, 1)), ShapeError),
    ("tensor_tensor", lambda: nisa.tensor_tensor(dst=t(128, 4), data1=t(128, 2, 2), data2=t(128, 4), op=ADD),
     lambda: nisa.tensor_tensor(dst=t(128, 4), data1=t(128, 4), data2=t(1, 4), op=ADD), ShapeError),
    ("tensor_scalar", lambda: nisa.tensor_scalar(dst=t(128, 8), data=t(128, 8), op0=ADD, operand0=t(128, 1)),
     lambda: nisa.tensor_scalar(dst=t(128, 8), data=t(128, 8), op0=ADD, operand0=1.0, op1=ADD),
     ArgumentError),
    ("scalar_tensor_tensor", lambda: nisa.scalar_tensor_tensor(dst=t(128, 8), data=t(128, 8), op0=ADD,
                                                               operand0=1.0, op1=ADD, operand1=t(128, 2, 4)),
     lambda: nisa.scalar_tensor_tensor(dst=t(128, 8), data=t(128, 8), op0=ADD, operand0=1.0, op1=ADD,
                                       operand1=t(128, 4)), ShapeError),
    ("tensor_reduce", lambda: nisa.tensor_reduce(dst=t(128, 2), op=ADD, data=t(128, 2, 4), axis=2),
     lambda: nisa.tensor_reduce(dst=t(128, 4), op=ADD, data=t(128, 2, 4), axis=2), ShapeError),
    ("tensor_reduce axis 5", lambda: nisa.tensor_reduce(dst=t(128, 1), op=ADD, data=t(128, 4), axis=-1),
     lambda: nisa.tensor_reduce(dst=t(128, 1), op=ADD, data=t(128, 4), axis=5), ShapeError),
    ("tensor_reduce axes", lambda: nisa.tensor_reduce(dst=t(128, 1), op=ADD, data=t(128, 2, 4), axis=(1, 2)),
     lambda: nisa.tensor_reduce(dst=t(128, 4), op=ADD, data=t(128, 2, 4), axis=1), ShapeError),
    ("tensor_reduce bits", lambda: nisa.tensor_reduce(dst=t(128, 1, dtype=I32), op=nl.bitwise_or,
                                                      data=t(128, 4, dtype=I32), axis=1),
     lambda: nisa.tensor_reduce(dst=t(128, 1), op=nl.bitwise_or, data=t(128, 4), axis=1), DTypeError),
    ("tensor_scalar_reduce op0", lambda: nisa.tensor_scalar_reduce(dst=t(128, 8), data=t(128, 8), op0=MUL,
                                                                   operand0=2.0, reduce_op=ADD),
     lambda: nisa.tensor_scalar_reduce(dst=t(128, 8), data=t(128, 8), op0=nl.bitwise_and, operand0=2.0,
                                       reduce_op=ADD), ArgumentError),
    ("tensor_scalar_reduce", lambda: nisa.tensor_scalar_reduce(dst=t(128, 8), data=t(128, 8), op0=ADD,
                                                               operand0=1.0, reduce_op=ADD,
                                                               reduce_res=t(128, 1)),
     lambda: nisa.tensor_scalar_reduce(dst=t(128, 8), data=t(128, 1), op0=ADD, operand0=1.0,
                                       reduce_op=ADD), ShapeError),
    ("tensor_tensor_scan", lambda: nisa.tensor_tensor_scan(dst=t(128, 8), data0=t(128, 8), data1=t(128, 8),
                                                           initial=0.0, op0=ADD, op1=ADD),
     lambda: nisa.tensor_tensor_scan(dst=t(128, 8), data0=t(128, 8), data1=t(128, 4), initial=0.0,
                                     op0=ADD, op1=ADD), ShapeError),
    ("tensor_partition_reduce", lambda: nisa.tensor_partition_reduce(dst=t(1, 8), op=ADD, data=t(128, 8)),
     lambda: nisa.tensor_partition_reduce(dst=t(128, 8), op=ADD, data=t(128, 8)), ShapeError),
    ("bn_stats", lambda: nisa.bn_stats(dst=t(128, 6), data=t(128, 8)),
     lambda: nisa.bn_stats(dst=t(128, 4), data=t(128, 8)), ShapeError),
    ("bn_aggr", lambda: nisa.bn_aggr(dst=t(128, 2), data=t(128, 12)),
     lambda: nisa.bn_aggr(dst=t(128, 2), data=t(128, 7)), ShapeError),
    ("bn_aggr dst", lambda: nisa.bn_aggr(dst=t(128, 2), data=t(128, 6)),
     lambda: nisa.bn_aggr(dst=t(128, 6), data=t(128, 6)), ShapeError),
    ("reciprocal", lambda: nisa.reciprocal(dst=t(128, 8), data=t(128, 8)),
     lambda: nisa.reciprocal(dst=t(128, 8), data=t(128, 4)), ShapeError),
    ("affine_select", lambda: nisa.affine_select(dst=t(128, 8), pattern=[[1, 8]], channel_multiplier=-1,
                                                 on_true_tile=t(128, 8), on_false_value=0.0, cmp_op=GE),
     lambda: nisa.affine_select(dst=t(128, 8), pattern=[[1, 4]], channel_multiplier=0, on_true_tile=t(128, 8),
                                on_false_value=0.0), ShapeError),
    ("range_select", lambda: nisa.range_select(dst=t(128, 8), on_true_tile=t(128, 8), comp_op0=GE,
                                               comp_op1=LT, bound0=0.0, bound1=4.0, reduce_res=t(128, 1)),
     lambda: nisa.range_select(dst=t(128, 8), on_true_tile=t(128, 8), comp_op0=GE,
                               comp_op1=LT, bound0=0.0, bound1=4.0, reduce_res=t(128, 2)), ShapeError),
    ("select_reduce", lambda: nisa.select_reduce(dst=t(128, 8), predicate=t(128, 8, dtype=nl.uint8),
                                                 on_true=t(128, 2, 4), on_false=0.0),
     lambda: nisa.select_reduce(dst=t(128, 8), predicate=t(128, 8, dtype=nl.uint8), on_true=t(128, 4),
                                on_false=0.0),
     ShapeError),
    ("max8", lambda: nisa.max8(dst=t(128, 8), src=t(128, 16)),
     lambda: nisa.max8(dst=t(128, 8), src=t(128, 4)), ShapeError),
    ("nc_find_index8", lambda: nisa.nc_find_index8(dst=t(128, 8, dtype=U32), data=t(128, 16), vals=t(128, 8)),
     lambda: nisa.nc_find_index8(dst=t(128, 4, dtype=U32), data=t(128, 16), vals=t(128, 8)), ShapeError),
    ("nc_find_index8 dtype", lambda: nisa.nc_find_index8(dst=t(128, 8, dtype=nl.uint16), data=t(128, 16),
                                                         vals=t(128, 8)),
     lambda: nisa.nc_find_index8(dst=t(128, 8), data=t(128, 16), vals=t(128, 8)), DTypeError),
    ("nc_match_replace8", lambda: nisa.nc_match_replace8(dst=t(128, 16), data=t(128, 16), vals=t(128, 8),
                                                         imm=0.0),
     lambda: nisa.nc_match_replace8(dst=t(128, 16), data=t(128, 16), vals=t(128, 4), imm=0.0), ShapeError),
    ("nc_stream_shuffle", lambda: nisa.nc_stream_shuffle(dst=t(32, 4), src=t(1, 4), shuffle_mask=[0] * 32),
     lambda: nisa.nc_stream_shuffle(dst=t(32, 4), src=t(32, 4), shuffle_mask=[40] * 32), ShapeError),
    ("nc_stream_shuffle keep", lambda: nisa.nc_stream_shuffle(dst=t(32, 4), src=t(32, 4),
                                                              shuffle_mask=[255] * 32),
     lambda: nisa.nc_stream_shuffle(dst=t(32, 4), src=t(1, 4), shuffle_mask=[1] * 32), ShapeError),
    ("nc_n_gather", lambda: nisa.nc_n_gather(dst=t(128, 4), data=t(128, 8), indices=t(128, 4, dtype=U32)),
     lambda: nisa.nc_n_gather(dst=t(128, 4), data=t(128, 8), indices=t(128, 4, value=7)), DTypeError),
    ("rng", lambda: nisa.rng(dst=t(128, 8)),
     lambda: nisa.rng(dst=nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)), KernelError),
    ("dropout", lambda: nisa.dropout(dst=t(128, 8), data=t(128, 8), prob=0.5),
     lambda: nisa.dropout(dst=t(128, 8), data=t(128, 8), prob=2.0), ArgumentError),
    ("register_load", lambda: nisa.register_load(reg(), t(1, 1, dtype=I32)),
     lambda: nisa.register_load(reg(), t(2, 1, dtype=I32)), ShapeError),
    ("register_store", lambda: nisa.register_store(t(1, 1, dtype=I32), reg()),
     lambda: nisa.register_store(t(1, 4, dtype=I32), reg()), ShapeError),
    ("nc_transpose", lambda: nisa.nc_transpose(dst=t(16, 32), data=t(32, 16), engine=nisa.engine.vector),
     lambda: nisa.nc_transpose(dst=t(32, 16), data=t(32, 16), engine=nisa.engine.vector), ShapeError),
]


def _run(call, mode):
    def kernel(x):
        call()
    if mode == "simulate":
        nki.simulate(kernel, target="trn2")(X)
    else:
        nki.trace(kernel, X, target="trn2")


@pytest.mark.parametrize("mode", ["simulate", "trace"])
@pytest.mark.parametrize(("name", "legal", "illegal", "error"), CASES, ids=[case[0] for case in CASES])
def test_legal_call_runs_and_illegal_shape_is_refused_at_its_line(name, legal, illegal, error, mode):
    _run(legal, mode)
    with pytest.raises(error) as caught:
        _run(illegal, mode)
    assert str(caught.value).startswith(f"{NAME}:{illegal.__code__.co_firstlineno} "), str(caught.value)


def test_every_opcode_has_a_check_rule():
    assert CHECK.missing() == []


def _line(marker: str) -> int:
    """The line of this file holding `marker` (outside this helper's callers' assertions)."""
    with open(__file__) as source:
        return next(number for number, text in enumerate(source, 1)
                    if marker in text and "_line(" not in text)


def _refused(error, marker, kernel, *args, target="trn2"):
    with pytest.raises(error) as caught:
        nki.simulate(kernel, target=target)(*args)
    assert str(caught.value).startswith(f"{NAME}:{_line(marker)} "), str(caught.value)
    return caught.value


def test_register_move_and_core_barrier_have_nothing_to_refuse():
    def kernel(x):
        register = nisa.register_alloc()
        nisa.register_move(register, 7)
        nisa.core_barrier()
        assert register.read_value() == 7
    nki.simulate(kernel, target="trn2")(X)


def test_indirect_gather_needs_an_index_per_step_and_may_reshape():
    table = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    rows = np.array([[3], [1], [0], [7]], np.int32)

    def gather(t, idx, index_rows):
        index = nl.load(idx[0:index_rows, :])
        tile = nl.ndarray((4, 2, 4), dtype=nl.float32, buffer=nl.sbuf)
        rows_view = t.ap([[8, 4], [1, 8]], vector_offset=index, indirect_dim=0)  # MARK-GATHER
        nisa.dma_copy(dst=tile, src=rows_view)
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out
    np.testing.assert_array_equal(nki.simulate(gather)(table, rows, 4), table[[3, 1, 0, 7]])
    _refused(ShapeError, "MARK-GATHER", gather, table, rows, 2)


def test_n_gather_index_out_of_range_is_a_hazard_that_writes_nothing():
    data = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    indices = np.zeros((128, 4), np.uint32)
    indices[5, 2] = 8

    def kernel(d, i):
        out = nl.full((128, 4), -1.0, nl.float32)
        try:
            nisa.nc_n_gather(dst=out, data=nl.load(d), indices=nl.load(i))  # MARK-NGATHER
        except HazardError as error:
            assert str(error).startswith(f"{NAME}:{_line('MARK-NGATHER')} "), str(error)
            assert "index 8" in str(error)
        result = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(result, out)
        return result
    with config.override(eager=True):
        kept = nki.simulate(kernel)(data, indices)
    assert (kept == -1.0).all()

    def queued(d, i):
        first = nl.load(d)
        nisa.nc_matmul(dst=nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum), stationary=first[0:8, 0:8],
                       moving=first[0:8, 0:8])  # from the first matmul on, instructions are queued
        gathered = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=gathered, data=first, indices=nl.load(i))  # MARK-QUEUED
        nisa.memset(dst=nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf), value=0.0)
    _refused(HazardError, "MARK-QUEUED", queued, data, indices)


def test_memset_into_integers_rounds_and_saturates_like_every_engine_write():
    def kernel(x):
        out = nl.ndarray((1, 4), dtype=nl.uint8, buffer=nl.shared_hbm)
        tile = nl.ndarray((1, 4), dtype=nl.uint8, buffer=nl.sbuf)
        for column, value in enumerate((-1.0, 300.0, 2.5, 7.0)):
            nisa.memset(dst=tile[:, column:column + 1], value=value)
        nisa.dma_copy(dst=out, src=tile)
        return out
    np.testing.assert_array_equal(nki.simulate(kernel)(X), [[0, 255, 2, 7]])


def test_packed_mx_tiles_are_only_copied_quantized_or_multiplied():
    def kernel(x):
        packed = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.quantize_mx(dst=packed, src=t(32, 16, dtype=nl.bfloat16), dst_scale=t(32, 4, dtype=nl.uint8))
        copy = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.tensor_copy(dst=copy, src=packed)
        nisa.tensor_copy(dst=t(32, 4), src=packed)  # MARK-PACKED
    error = _refused(DTypeError, "MARK-PACKED", kernel, X, target="trn3")
    assert "packs four values" in str(error)


def test_mx_scale_tile_must_hold_every_group_scale():
    def kernel(x):
        packed = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        scale = t(2, 4, dtype=nl.uint8)
        nisa.quantize_mx(dst=packed, src=t(32, 16, dtype=nl.bfloat16), dst_scale=scale)  # MARK-SC
    error = _refused(ShapeError, "MARK-SC", kernel, X, target="trn3")
    assert "4 MX groups" in str(error)


def test_sendrecv_moves_equal_sizes():
    @nki.jit
    def swap(x):
        mine = nl.load(x[0:64, :])
        theirs = nl.ndarray((64, 4), dtype=nl.float32, buffer=nl.sbuf)
        me = nl.program_id(0)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)  # MARK-SR
    _refused(ShapeError, "MARK-SR", swap[2], X)


def test_integer_writes_of_iota_and_register_store_saturate():
    def kernel(x):
        out = nl.ndarray((1, 6), dtype=nl.uint8, buffer=nl.shared_hbm)
        tile = nl.ndarray((1, 6), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.iota(dst=tile[:, 0:4], pattern=[[100, 4]])
        nisa.register_store(tile[:, 4:5], nisa.register_alloc(300))
        wide = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.register_store(wide, nisa.register_alloc(7))
        nisa.tensor_copy(dst=tile[:, 5:6], src=wide)
        nisa.dma_copy(dst=out, src=tile)
        return out
    np.testing.assert_array_equal(nki.simulate(kernel)(X), [[0, 100, 200, 255, 255, 7]])


def test_register_load_of_nan_is_a_hazard_at_its_line():
    def kernel(x):
        tile = t(1, 1, value=float("nan"))
        nisa.register_load(nisa.register_alloc(), tile)  # MARK-REGNAN
    _refused(HazardError, "MARK-REGNAN", kernel, X)


def test_same_size_operands_with_other_access_patterns_combine_in_row_major_order():
    """[P, 2, 2] and [P, 4] views of the same number of elements pair element i with element i."""
    a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    b = np.arange(8 * 4, dtype=np.float32).reshape(8, 2, 2) * 10

    def kernel(x, y):
        first = nl.load(x)
        second = nl.load(y)
        total = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=first, data2=second, op=nl.add)
        kept = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=kept, value=-1.0)
        nisa.tensor_copy_predicated(dst=kept, src=total, predicate=second)  # row 0, column 0 is 0
        out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, kept)
        return out
    expected = a + b.reshape(8, 4)
    expected[0, 0] = -1.0
    np.testing.assert_array_equal(nki.simulate(kernel)(a, b), expected)
