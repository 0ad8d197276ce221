"""The long tail of nisa: local_gather, sequence_bounds, nonzero_with_count and the PRNG state
instructions, each against an independent numpy reference, plus the checks that refuse misuse."""

import ml_dtypes
import numpy as np
import pytest
from kernel_helpers import on_chip, to_hbm

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import hardware
from trnsim.errors import ArgumentError, DTypeError, HazardError, KernelError, ShapeError, UnsupportedError

RNG = np.random.default_rng(7)
GROUP = hardware.core("trn2").gpsimd_group_partitions


# --- local_gather ------------------------------------------------------------------------------
def gather_reference(src, index, per_index, valid):
    """Per group: the group's indices column-major, each selecting `per_index` elements of every row."""
    rows = src.shape[0]
    flat = src.reshape(rows, -1)
    out = np.empty((rows, valid, per_index), src.dtype)
    for start in range(0, rows, GROUP):
        picks = index[start:start + GROUP].reshape(GROUP, -1).T.reshape(-1)[:valid]
        for j, k in enumerate(picks):
            out[start:start + GROUP, j] = flat[start:start + GROUP, int(k):int(k) + per_index]
    return out


def run_gather(src, index, out_shape, target="trn2", **options):
    def kernel(s, i):
        dst = nl.ndarray(out_shape, dtype=s.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=dst, src_buffer=on_chip(s), index=on_chip(i), **options)
        return to_hbm(dst)
    return np.asarray(nki.simulate(kernel, target=target)(src, index))


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_local_gather_published_example(target):
    """src [128, 512, 4], the same 16x4 indices in every group, 4 elements per index, 64 valid."""
    src = RNG.random((128, 512, 4)).astype(np.float32)
    blocks = np.tile(RNG.integers(0, 512, (GROUP, 4)), (128 // GROUP, 1))
    index = (blocks * 4).astype(np.uint16)
    got = run_gather(src, index, (128, 4, 16, 4), target, num_elem_per_idx=4, num_valid_indices=64)
    expected = np.empty((128, 64, 4), np.float32)  # the published formulation: np.take on blocks of 4
    for start in range(0, 128, GROUP):
        rows = slice(start, start + GROUP)
        expected[rows] = np.take(src[rows], blocks[rows].flatten(order="F")[:64], axis=1)
    np.testing.assert_array_equal(got.reshape(128, 64, 4), expected)


def test_local_gather_groups_use_their_own_indices_and_keep_bits():
    """Different indices per group, default num_valid_indices (all), bf16 copied bit for bit."""
    src = RNG.normal(size=(32, 40)).astype(ml_dtypes.bfloat16)
    index = RNG.integers(0, 39, (32, 3)).astype(np.uint16)
    got = run_gather(src, index, (32, 48), num_elem_per_idx=1)
    expected = gather_reference(src, index, 1, 48).reshape(32, 48)
    assert got.view(np.uint16).tolist() == expected.view(np.uint16).tolist()


def test_local_gather_fewer_valid_indices_with_runs():
    src = np.arange(64 * 20, dtype=np.int32).reshape(64, 20)
    index = RNG.integers(0, 13, (64, 2)).astype(np.uint16)
    got = run_gather(src, index, (64, 5, 8), num_elem_per_idx=8, num_valid_indices=5)
    np.testing.assert_array_equal(got, gather_reference(src, index, 8, 5))


@pytest.mark.parametrize("change,error,match", [
    ({"index_dtype": np.int32}, DTypeError, "uint16"),
    ({"per_index": 3}, ShapeError, "num_elem_per_idx=3"),
    ({"valid": 65}, ShapeError, "num_valid_indices=65"),
    ({"out_shape": (16, 63)}, ShapeError, "num_valid_indices x num_elem_per_idx = 64"),
    ({"rows": 8}, ShapeError, "whole groups of 16"),
    ({"top": 40}, HazardError, "reaches past"),
])
def test_local_gather_refuses_misuse(change, error, match):
    rows = change.get("rows", 16)
    src = RNG.random((rows, 40)).astype(np.float32)
    index = RNG.integers(0, change.get("top", 39), (rows, 4)).astype(change.get("index_dtype", np.uint16))
    index[0, 0] = change.get("top", 0)
    per_index, valid = change.get("per_index", 1), change.get("valid", rows * 4)
    with pytest.raises(error, match=match) as caught:
        run_gather(src, index, change.get("out_shape", (rows, valid * per_index)),
                   num_elem_per_idx=per_index, num_valid_indices=valid)
    assert caught.value.where is not None and caught.value.where.file == __file__


def test_local_gather_rejects_a_tensor_as_count():
    def kernel(s):
        tile = on_chip(s)
        nisa.local_gather(dst=tile, src_buffer=tile, index=tile, num_elem_per_idx=tile)
    with pytest.raises(KernelError, match="num_elem_per_idx must be an integer"):
        nki.simulate(kernel, target="trn2")(np.zeros((16, 4), np.float32))


# --- sequence_bounds ---------------------------------------------------------------------------
def bounds_reference(ids):
    """Loop form: a run starts where the id changes and ends (exclusive) before the next change."""
    n = len(ids)
    starts, ends = np.zeros(n), np.zeros(n)
    for i in range(n):
        if ids[i] == 0:
            starts[i], ends[i] = n, -1
            continue
        lo = i
        while lo > 0 and ids[lo - 1] == ids[i]:
            lo -= 1
        hi = i + 1
        while hi < n and ids[hi] == ids[i]:
            hi += 1
        starts[i], ends[i] = lo, hi
    return np.stack([starts, ends])[None]


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_sequence_bounds_matches_loop_reference(dtype):
    ids = np.repeat(RNG.integers(0, 4, 40), RNG.integers(1, 6, 40))[:128].astype(dtype)[None, :]
    ids[0, :3] = [2, 2, 0]

    def kernel(segments):
        dst = nl.ndarray((1, 2, segments.shape[1]), dtype=segments.dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=dst, segment_ids=on_chip(segments))
        return to_hbm(dst)
    got = np.asarray(nki.simulate(kernel, target="trn2")(ids))
    np.testing.assert_array_equal(got, bounds_reference(ids[0]))
    assert (got[0, 1] == -1).sum() == (ids == 0).sum()


def test_sequence_bounds_needs_one_partition_and_int_or_fp32():
    def kernel(segments, out_dtype):
        dst = nl.ndarray((segments.shape[0], 2, segments.shape[1]), dtype=out_dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=dst, segment_ids=on_chip(segments))
    with pytest.raises(ShapeError, match="partition dimension of 1"):
        nki.simulate(kernel, target="trn2")(np.ones((2, 8), np.int32), "int32")
    with pytest.raises(DTypeError, match="int32 or float32"):
        nki.simulate(kernel, target="trn2")(np.ones((1, 8), np.int32), "bfloat16")


# --- nonzero_with_count ------------------------------------------------------------------------
@pytest.mark.parametrize("target,dtype", [("trn2", np.float32), ("trn3", np.int32)])
def test_nonzero_with_count_on_group_leaders_only(target, dtype):
    src = (RNG.random((128, 24)) * (RNG.random((128, 24)) < 0.4)).astype(dtype) * 5
    src[GROUP] = 0  # a group leader with nothing to find

    def kernel(values):
        dst = nl.ndarray((128, 25), dtype="int32", buffer=nl.sbuf)
        nisa.memset(dst=dst, value=7)
        nisa.nonzero_with_count(dst=dst, src=on_chip(values), index_offset=100, padding_val=-3)
        return to_hbm(dst)
    got = np.asarray(nki.simulate(kernel, target=target)(src))
    expected = np.full((128, 25), 7)
    for row in range(0, 128, GROUP):
        found = [i + 100 for i in range(24) if src[row, i] != 0]
        expected[row] = found + [-3] * (24 - len(found)) + [len(found)]
    np.testing.assert_array_equal(got, expected)
    assert got[GROUP, -1] == 0


def test_nonzero_with_count_checks():
    def kernel(values, out_dtype, width):
        dst = nl.ndarray((values.shape[0], width), dtype=out_dtype, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=dst, src=on_chip(values))
    ones = np.ones((16, 8), np.float32)
    with pytest.raises(UnsupportedError, match="generation 3"):
        nki.simulate(kernel, target="trn1")(ones, "int32", 9)
    with pytest.raises(DTypeError, match="writes int32"):
        nki.simulate(kernel, target="trn2")(ones, "float32", 9)
    with pytest.raises(ShapeError, match="one more element"):
        nki.simulate(kernel, target="trn2")(ones, "int32", 8)


# --- rand_set_state / rand_get_state -----------------------------------------------------------
def draw(shape=(128, 16)):
    tile = nl.ndarray(shape, dtype="float32", buffer=nl.sbuf)
    nisa.rng(dst=tile)
    return tile


@pytest.mark.parametrize("target,engine", [("trn2", "gpsimd"), ("trn3", "gpsimd"), ("trn3", "vector")])
def test_saved_state_replays_the_random_numbers(target, engine):
    words = hardware.core(target).engines[engine].rng_state_words

    def kernel(seed):
        nisa.set_rng_seed(seed)
        state = nl.ndarray((128, words), dtype="uint32", buffer=nl.sbuf)
        nisa.rand_get_state(dst=state, engine=getattr(nisa.engine, engine))
        again = nl.ndarray((128, words), dtype="uint32", buffer=nl.sbuf)
        nisa.rand_get_state(dst=again, engine=getattr(nisa.engine, engine))
        first = draw()
        nisa.rand_set_state(src_seeds=state, engine=getattr(nisa.engine, engine))
        second = draw()
        return to_hbm(state), to_hbm(again), to_hbm(first), to_hbm(second)
    state, again, first, second = (np.asarray(a) for a in nki.simulate(kernel, target=target)(3))
    assert state.shape == (128, words) and len(np.unique(state)) > words
    np.testing.assert_array_equal(state, again)
    np.testing.assert_array_equal(first, second)
    assert len(np.unique(first)) > 1000


def test_set_state_seeds_deterministically_and_partial_lanes_keep_the_rest():
    def kernel(seeds, other):
        nisa.rand_set_state(src_seeds=on_chip(seeds))
        first = draw()
        nisa.rand_set_state(src_seeds=on_chip(seeds))
        again = draw()
        nisa.rand_set_state(src_seeds=on_chip(other)[0:32])
        changed = draw()
        state = nl.ndarray((128, 6), dtype="uint32", buffer=nl.sbuf)
        nisa.rand_get_state(dst=state)
        return to_hbm(first), to_hbm(again), to_hbm(changed), to_hbm(state)
    seeds = RNG.integers(0, 2 ** 32, (128, 6), dtype=np.uint64).astype(np.uint32)
    other = RNG.integers(0, 2 ** 32, (128, 6), dtype=np.uint64).astype(np.uint32)
    first, again, changed, state = (np.asarray(a) for a in nki.simulate(kernel, target="trn2")(seeds, other))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, changed)
    assert not np.array_equal(state, seeds)  # drew since the last set: fresh words


@pytest.mark.parametrize("target,engine,shape,dtype,error,match", [
    ("trn2", "vector", (128, 24), "uint32", KernelError, "no PRNG state"),
    ("trn2", "gpsimd", (128, 5), "uint32", ShapeError, "6 words per lane"),
    ("trn3", "gpsimd", (128, 6), "int32", DTypeError, "uint32"),
    ("trn1", "gpsimd", (128, 6), "uint32", UnsupportedError, "generation 3"),
])
def test_rand_state_checks(target, engine, shape, dtype, error, match):
    def kernel():
        state = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
        nisa.rand_get_state(dst=state, engine=getattr(nisa.engine, engine))
    with pytest.raises(error, match=match):
        nki.simulate(kernel, target=target)()


# --- NkiTensor.vector_select ---------------------------------------------------------------------
def test_vector_select_gathers_and_scatters_rows_of_an_hbm_tensor():
    table = RNG.random((64, 16, 8)).astype(np.float32)
    rows = RNG.permutation(64)[:32].astype(np.int32).reshape(32, 1)

    def kernel(t, idx):
        offsets = on_chip(idx)
        picked = t.vector_select(0, offsets)
        assert picked.is_indirect() and picked.shape == (32, 16, 8) and not t.is_indirect()
        tile = nl.ndarray((32, 16, 8), dtype=t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=picked)
        doubled = nl.ndarray((32, 16, 8), dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=doubled, data=tile, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=t.vector_select(0, offsets), src=doubled)
        return to_hbm(tile)
    updated = table.copy()
    gathered = np.asarray(nki.simulate(kernel, target="trn2")(updated, rows))
    np.testing.assert_array_equal(gathered, table[rows[:, 0]])
    expected = table.copy()
    expected[rows[:, 0]] *= 2
    np.testing.assert_array_equal(updated, expected)


@pytest.mark.parametrize("case,match", [
    ("dim1", "only dim 0"), ("sbuf", "HBM tensors"), ("float_index", "integer tile"), ("twice", "already"),
])
def test_vector_select_refuses_misuse(case, match):
    def kernel(t, idx, float_idx):
        offsets = on_chip(idx)
        if case == "dim1":
            t.vector_select(1, offsets)
        elif case == "sbuf":
            on_chip(t).vector_select(0, offsets)
        elif case == "float_index":
            t.vector_select(0, on_chip(float_idx))
        else:
            t.vector_select(0, offsets).vector_select(0, offsets)
    with pytest.raises(ShapeError, match=match):
        nki.simulate(kernel, target="trn2")(np.zeros((8, 4), np.float32), np.zeros((4, 1), np.int32),
                                            np.zeros((4, 1), np.float32))


def test_vector_select_out_of_range_row_is_a_hazard():
    def kernel(t, idx):
        tile = nl.ndarray((2, 4), dtype=t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=t.vector_select(0, on_chip(idx)))
    with pytest.raises(HazardError, match="indirect DMA"):
        nki.simulate(kernel, target="trn2")(np.zeros((8, 4), np.float32), np.array([[1], [8]], np.int32))


# --- NkiTensor.indirect (trn3 tensor indirection) ----------------------------------------------
TI_GROUP = hardware.core("trn3").engines["vector"].indirection_group_partitions


def ti_offsets(index, count, group):
    """Loop form of the snake layout: group g's offset i is index[g*group + i % group, i // group]."""
    rows = index.shape[0]
    group = min(group, rows)
    return np.array([[index[(p // group) * group + i % group, i // group] for i in range(count)]
                     for p in range(rows)])


def test_indirect_gathers_columns_per_partition_group():
    data = RNG.random((32, 40)).astype(np.float32)
    index = RNG.integers(0, 40, (32, 3)).astype(np.int32)

    def kernel(d, i):
        tile, offsets = on_chip(d), on_chip(i)
        view = tile.indirect(offsets, 48)
        assert view.shape == (32, 48) and view.is_indirect()
        copied = nl.ndarray((32, 48), dtype=d.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=copied, src=view, engine=nisa.vector_engine)
        activated = nl.ndarray((32, 48), dtype=d.dtype, buffer=nl.sbuf)
        nisa.activation(dst=activated, op=nl.exp, data=view)
        return to_hbm(copied), to_hbm(activated)
    copied, activated = (np.asarray(a) for a in nki.simulate(kernel, target="trn3")(data, index))
    columns = ti_offsets(index, 48, TI_GROUP)
    expected = np.take_along_axis(data, columns, axis=1)
    np.testing.assert_array_equal(copied, expected)
    np.testing.assert_allclose(activated, np.exp(expected), rtol=1e-6)


def test_indirect_scatters_and_single_group_uses_whole_index():
    data = RNG.random((16, 24)).astype(np.float32)
    index = RNG.permutation(24)[:16].reshape(16, 1).astype(np.uint32)

    def kernel(d, i):
        tile = on_chip(d)
        target = tile.indirect(on_chip(i))  # one group: num_elem defaults to index.size
        nisa.memset(dst=target, value=-5.0, engine=nisa.gpsimd_engine)
        return to_hbm(tile)
    updated = np.asarray(nki.simulate(kernel, target="trn3")(data, index))
    expected = data.copy()
    expected[:, index[:, 0]] = -5.0
    np.testing.assert_array_equal(updated, expected)


def test_indirect_trace_counts_the_gathered_elements():
    def kernel(d, i):
        out = nl.ndarray((32, 20), dtype=d.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=on_chip(d).indirect(on_chip(i), 20), engine=nisa.vector_engine)
    trace = nki.trace(kernel, np.zeros((32, 40), np.float32), np.zeros((32, 2), np.int32), target="trn3")
    copy = trace[-1]
    assert copy.inputs[0].elements_per_partition == 20 and copy.inputs[0].partition_count == 32


@pytest.mark.parametrize("case,error,match", [
    ("trn2", UnsupportedError, "NeuronCore-v4"),
    ("matmul", UnsupportedError, "nc_matmul are not emulated"),
    ("too_many", ShapeError, "each group holds 48"),
    ("outside", HazardError, "outside the 40 elements"),
    ("hbm", ShapeError, "SBUF tile"),
])
def test_indirect_refuses_misuse(case, error, match):
    index = np.full((32, 3), 41 if case == "outside" else 1, np.int32)

    def kernel(d, i):
        if case == "hbm":
            d.indirect(on_chip(i), 4)
        count = 49 if case == "too_many" else 32
        view = on_chip(d).indirect(on_chip(i), count)
        out = nl.ndarray((32, count), dtype=d.dtype, buffer=nl.psum if case == "matmul" else nl.sbuf)
        if case == "matmul":
            nisa.nc_matmul(dst=out, stationary=view, moving=view)
        else:
            nisa.tensor_copy(dst=out, src=view)
    with pytest.raises(error, match=match):
        target = "trn2" if case == "trn2" else "trn3"
        nki.simulate(kernel, target=target)(np.ones((32, 40), np.float32), index)


@pytest.mark.parametrize(("shape", "dtype", "buffer", "error", "match"), [
    ((1, 2), "int32", "sbuf", ShapeError, r"shape \[1, 2\]; the seed is a \[1, 1\] tile"),
    ((128, 1), "uint32", "sbuf", ShapeError, r"shape \[128, 1\]"),
    ((1, 1), "int16", "sbuf", ArgumentError, "int16; the seed is a 32-bit value"),
    ((1, 1), "int32", "hbm", ArgumentError, "in hbm; the seed is read from SBUF or PSUM"),
])
def test_set_rng_seed_takes_a_one_by_one_32_bit_tile_on_chip(shape, dtype, buffer, error, match):
    """The limits the SDK's nki.isa.set_rng_seed docstring states, refused at the kernel's line."""
    def kernel():
        seed = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf if buffer == "sbuf" else nl.shared_hbm)
        nisa.set_rng_seed(seed)
        return to_hbm(draw())
    with pytest.raises(error, match=match) as raised:
        nki.simulate(kernel, target="trn2")()
    assert "test_nki_long_tail.py" in str(raised.value)
