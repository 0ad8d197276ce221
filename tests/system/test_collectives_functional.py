"""nki.collectives on N ranks (threads): every collective equals numpy on 2, 4, 16 and 64 ranks, and
the documented refusals raise."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.collectives as ncc
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import hardware, system
from trnsim.errors import ArgumentError, DTypeError, KernelError, ShapeError, UnsupportedError

RANKS = (2, 4, 16, 64)


def hbm(shape, dtype, name=None):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm, name=name)


def staged(input):
    """A collective may not touch kernel inputs or outputs: copy the input into an internal tensor."""
    src = hbm(input.shape, input.dtype, "src")
    nisa.dma_copy(dst=src, src=input)
    return src


def returned(dst):
    out = hbm(dst.shape, dst.dtype)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def all_reduce_kernel(input, group, op):
    src, dst = staged(input), hbm(input.shape, input.dtype, "dst")
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=op)
    return returned(dst)


@nki.jit
def all_gather_kernel(input, group, ranks):
    src, dst = staged(input), hbm((input.shape[0] * ranks, input.shape[1]), input.dtype, "dst")
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    return returned(dst)


@nki.jit
def reduce_scatter_kernel(input, group, ranks):
    src, dst = staged(input), hbm((input.shape[0] // ranks, input.shape[1]), input.dtype, "dst")
    ncc.reduce_scatter(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0, op=nl.add)
    return returned(dst)


@nki.jit
def all_to_all_kernel(input, group):
    src, dst = staged(input), hbm(input.shape, input.dtype, "dst")
    ncc.all_to_all(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    return returned(dst)


@nki.jit
def permute_kernel(input, pairs):
    src, dst = staged(input), hbm(input.shape, input.dtype, "dst")
    zeros = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=dst, src=zeros)
    ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=pairs)
    return returned(dst)


@nki.jit
def ring_kernel(input, group, steps):
    """collective_permute_implicit round the ring: after each step, the register says whose data arrived;
    the kernel stores it in block (that rank) of the output, which starts as zeros."""
    rows, cols = input.shape
    ranks = len(group.groups[0])
    out = hbm((rows * ranks, cols), input.dtype)
    zeros = nl.ndarray((rows, cols), dtype=input.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    for block in range(ranks):
        nisa.dma_copy(dst=out[block * rows:(block + 1) * rows, :], src=zeros)
    current = staged(input)
    for step in range(steps):
        owner = ncc.collective_permute_implicit_current_processing_rank_id(iteration_id=step,
                                                                           replica_group=group)
        tile = nl.ndarray((rows, cols), dtype=input.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=current)
        nisa.dma_copy(dst=out[int(owner) * rows:(int(owner) + 1) * rows, :], src=tile)
        received = hbm((rows, cols), input.dtype, f"recv{step}")
        ncc.collective_permute_implicit(srcs_by_channel=[[current]], dsts_by_channel=[[received]],
                                        replica_group=group)
        current = received
    return out


def inputs(ranks, shape=(4, 8), dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(ranks)]


def group_of(ranks):
    return ncc.ReplicaGroup([list(range(ranks))])


@pytest.mark.parametrize("ranks", RANKS)
def test_all_reduce_sum_max_min_equal_numpy(ranks):
    xs = inputs(ranks)
    for op, reference in ((nl.add, np.sum), (nl.maximum, np.max), (nl.minimum, np.min)):
        results = system.launch(all_reduce_kernel, ranks, [(x, group_of(ranks), op) for x in xs])
        expected = reference(np.stack(xs), axis=0)
        assert all(np.array_equal(r, expected) for r in results)


@pytest.mark.parametrize("ranks", RANKS)
def test_all_gather_reduce_scatter_all_to_all_equal_numpy(ranks):
    xs = inputs(ranks, (2 * ranks, 4))
    gathered = system.launch(all_gather_kernel, ranks, [(x, group_of(ranks), ranks) for x in xs])
    assert all(np.array_equal(r, np.concatenate(xs)) for r in gathered)
    scattered = system.launch(reduce_scatter_kernel, ranks, [(x, group_of(ranks), ranks) for x in xs])
    total = np.sum(np.stack(xs), axis=0)
    assert all(np.array_equal(r, np.split(total, ranks)[i]) for i, r in enumerate(scattered))
    exchanged = system.launch(all_to_all_kernel, ranks, [(x, group_of(ranks)) for x in xs])
    for i, result in enumerate(exchanged):
        assert np.array_equal(result, np.concatenate([np.split(x, ranks)[i] for x in xs]))


@pytest.mark.parametrize("ranks", RANKS)
def test_permutes_and_ring_registers_equal_numpy(ranks):
    xs = inputs(ranks, dtype=np.float32)
    pairs = [(r, r + 1) for r in range(ranks - 1)]  # nobody sends to rank 0: its dst keeps its zeros
    results = system.launch(permute_kernel, ranks, [(x, pairs) for x in xs])
    assert np.array_equal(results[0], np.zeros_like(xs[0]))
    assert all(np.array_equal(results[r], xs[r - 1]) for r in range(1, ranks))
    steps = min(ranks, 4)
    ring = system.launch(ring_kernel, ranks, [(x, group_of(ranks), steps) for x in xs])
    rows = xs[0].shape[0]
    for rank, out in enumerate(ring):
        visited = {(rank - step) % ranks for step in range(steps)}
        for owner in range(ranks):
            block = out[owner * rows:(owner + 1) * rows]
            assert np.array_equal(block, xs[owner] if owner in visited else np.zeros_like(block))


def test_replica_groups_split_the_ranks_and_bf16_sums_in_fp32():
    import ml_dtypes
    xs = inputs(8, dtype=ml_dtypes.bfloat16)
    group = ncc.ReplicaGroup([[0, 2, 4, 6], [1, 3, 5, 7]])
    results = system.launch(all_reduce_kernel, 8, [(x, group, nl.add) for x in xs])
    for rank, result in enumerate(results):
        members = [xs[r].astype(np.float32) for r in range(rank % 2, 8, 2)]
        assert result.dtype == ml_dtypes.bfloat16
        assert np.array_equal(result, np.sum(np.stack(members), axis=0).astype(ml_dtypes.bfloat16))


@nki.jit
def sbuf_gather_kernel(input, group, ranks):
    tile = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=input)
    gathered = nl.ndarray((input.shape[0], input.shape[1] * ranks), dtype=input.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[tile], dsts=[gathered], replica_group=group, collective_dim=1)
    out = hbm(gathered.shape, input.dtype)
    nisa.dma_copy(dst=out, src=gathered)
    return out


@nki.jit
def rank_id_kernel(table):
    _, rows, cols = table.shape
    out = hbm((rows, cols), table.dtype)
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[cols, rows], [1, cols]], scalar_offset=ncc.rank_id(),
                                        indirect_dim=0))
    return out


def test_sbuf_all_gather_on_dim_1_and_rank_id():
    xs = inputs(4, (8, 4))
    results = system.launch(sbuf_gather_kernel, 4, [(x, group_of(4), 4) for x in xs])
    assert all(np.array_equal(r, np.concatenate(xs, axis=1)) for r in results)
    table = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3)
    picked = system.launch(rank_id_kernel, 4, lambda rank: (table,))
    assert all(np.array_equal(p, table[rank]) for rank, p in enumerate(picked))


def kernel_calling(call):
    @nki.jit
    def kernel(input):
        call(input)
        return returned(staged(input))
    return kernel


def _on_sbuf(shape):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)


REFUSALS = {
    "io tensor": (lambda x: ncc.all_reduce([x], [hbm(x.shape, x.dtype, "d")], group_of(2), nl.add),
                  ArgumentError, "cannot read or write IO tensors"),
    "mixed memories": (lambda x: ncc.all_reduce([staged(x)], [_on_sbuf(x.shape)], group_of(2), nl.add),
                       ArgumentError, "mixing memory spaces"),
    "coalesced sbuf": (lambda x: ncc.all_reduce([_on_sbuf(x.shape)] * 2, [_on_sbuf(x.shape)] * 2, group_of(2),
                                                nl.add), ArgumentError, "coalesced collectives are HBM only"),
    "hbm gather dim 1": (lambda x: ncc.all_gather([staged(x)], [hbm((4, 16), x.dtype, "d")], group_of(2), 1),
                         ArgumentError, "collective_dim=1"),
    "reduce op": (lambda x: ncc.all_reduce([staged(x)], [hbm(x.shape, x.dtype, "d")], group_of(2),
                                           nl.multiply), ArgumentError, "nl.add, nl.minimum or nl.maximum"),
    "sbuf all_to_all": (lambda x: ncc.all_to_all([_on_sbuf(x.shape)], [_on_sbuf(x.shape)], group_of(2), 0),
                        ArgumentError, "not for all_to_all"),
    "sbuf collective_permute": (lambda x: ncc.collective_permute([_on_sbuf(x.shape)], [_on_sbuf(x.shape)],
                                                                 [(0, 1), (1, 0)]),
                                ArgumentError, "not for all_to_all or collective_permute"),
    "rank outside": (lambda x: ncc.all_reduce([staged(x)], [hbm(x.shape, x.dtype, "d")],
                                              ncc.ReplicaGroup([[0]]), nl.add), ArgumentError, "in no list"),
    "shape": (lambda x: ncc.all_gather([staged(x)], [hbm(x.shape, x.dtype, "d")], group_of(2), 0),
              ShapeError, "needs \\[8, 8\\]"),
    "dtype": (lambda x: ncc.all_reduce([staged(x)], [hbm(x.shape, nl.bfloat16, "d")], group_of(2), nl.add),
              DTypeError, "moves elements unchanged"),
    "priority before trn3": (lambda x: ncc.all_reduce([staged(x)], [hbm(x.shape, x.dtype, "d")], group_of(2),
                                                      nl.add, priority=1), UnsupportedError, "priority"),
    "channels": (lambda x: ncc.collective_permute_implicit([[staged(x)]] * 3,
                                                           [[hbm(x.shape, x.dtype, "d")]] * 3, group_of(2),
                                                           channel_ids=[0, 1, 2]),
                 ArgumentError, "at most 2"),
    "channel ids": (lambda x: ncc.collective_permute_implicit([[staged(x)]], [[hbm(x.shape, x.dtype, "d")]],
                                                              group_of(2), channel_ids=[1]),
                    ArgumentError, "consecutive from 0"),
    "variable sizes rdispls": (lambda x: ncc.all_gather_v([staged(x)], [staged(x)], group_of(2), staged(x),
                                                          has_rdispls=True), UnsupportedError, "has_rdispls"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_documented_refusals_name_the_kernel_line(name):
    call, error, text = REFUSALS[name]
    with pytest.raises(error, match=text) as caught:
        system.launch(kernel_calling(call), 2, [np.zeros((4, 8), np.float32)] * 2)
    assert "test_collectives_functional.py" in str(caught.value)


@nki.jit
def sbuf_ring_step(input, group):
    """One ring step between SBUF tiles (nki-library's fine-grained all-gather permutes SBUF tiles)."""
    tile, received = _on_sbuf(input.shape), _on_sbuf(input.shape)
    nisa.dma_copy(dst=tile, src=input)
    ncc.collective_permute_implicit(srcs_by_channel=[[tile]], dsts_by_channel=[[received]],
                                    replica_group=group)
    return returned(received)


def test_the_ring_permute_takes_sbuf_tiles():
    """collective_permute_implicit's doc sets no memory (collective_permute's says HBM): SBUF tiles go
    round the ring, each rank receiving its predecessor's."""
    xs = inputs(4)
    results = system.launch(sbuf_ring_step, 4, [(x, group_of(4)) for x in xs])
    for rank, result in enumerate(results):
        np.testing.assert_array_equal(result, xs[(rank - 1) % 4])


def test_refusals_outside_a_rank_launch_and_for_overlapping_groups():
    with pytest.raises(UnsupportedError, match="system.launch"):
        nki.simulate(kernel_calling(lambda x: ncc.rank_id()))(np.zeros((4, 8), np.float32))
    with pytest.raises(ArgumentError, match="overlap"):
        ncc.ReplicaGroup([[0, 1], [1, 2]])


def test_a_rank_that_skips_a_collective_is_reported_not_hung():
    @nki.jit
    def uneven(input, rank):
        if rank == 0:
            all_reduce_kernel(input, group_of(2), nl.add)
        return returned(staged(input))

    with pytest.raises(KernelError, match="finished the kernel without it"):
        system.launch(uneven, 2, lambda rank: (np.zeros((4, 8), np.float32), rank))


@nki.jit
def ring_reduce_kernel(x, y, group):
    dst = hbm(x.shape, x.dtype, "dst")
    ncc.collective_permute_implicit_reduce(srcs0_by_channel=[[staged(x)]], srcs1_by_channel=[[staged(y)]],
                                           dsts_by_channel=[[dst]], replica_group=group, op=nl.maximum)
    return returned(dst)


def test_permute_implicit_reduce_sends_the_local_reduction_to_the_successor():
    import ml_dtypes
    xs, ys = inputs(4, dtype=ml_dtypes.bfloat16, seed=1), inputs(4, dtype=ml_dtypes.bfloat16, seed=2)
    results = system.launch(ring_reduce_kernel, 4, [(x, y, group_of(4)) for x, y in zip(xs, ys, strict=True)])
    for rank, result in enumerate(results):
        assert np.array_equal(result, np.maximum(xs[rank - 1], ys[rank - 1]))


def test_a_rank_trace_times_its_collective_with_the_system_model():
    from trnsim.core.isa import Opcode
    from trnsim.timing.costs import COST
    from trnsim.timing.schedule import latency_s

    xs = inputs(16, (256, 512))
    trace = system.launch(all_reduce_kernel, 16, [(x, group_of(16), nl.add) for x in xs]).traces[3]
    [collective] = [ins for ins in trace if ins.opcode is Opcode.COLLECTIVE]
    expected = system.collective_time("all_reduce", 256 * 512 * 4, 16, "trn2.48xlarge").seconds
    assert COST[Opcode.COLLECTIVE](collective, hardware.core("trn2")) == pytest.approx(expected)
    assert latency_s(trace, "trn2") > expected
    # retargeted like any trace: on trn1 the same group is 16 of a trn1.32xlarge's ranks (LNC=1)
    on_trn1 = system.collective_time("all_reduce", 256 * 512 * 4, 16, "trn1.32xlarge").seconds
    assert COST[Opcode.COLLECTIVE](collective, hardware.core("trn1")) == pytest.approx(on_trn1)
    assert on_trn1 > expected


@nki.jit
def uneven_work_kernel(input, group, extra):
    """Rank-dependent work before an all_reduce: the fast ranks wait for the slowest at the collective."""
    tile = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=input)
    for _ in range(extra):
        nisa.activation(dst=tile, op=nl.exp, data=tile)
    src = hbm(input.shape, input.dtype, "src")
    nisa.dma_copy(dst=src, src=tile)
    dst = hbm(input.shape, input.dtype, "dst")
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)
    return returned(dst)


def test_one_timeline_holds_each_collective_for_its_slowest_rank(tmp_path):
    results = system.launch(uneven_work_kernel, 4, lambda rank: (np.zeros((128, 512), np.float32) + 0.01,
                                                                 group_of(4), 20 * rank))
    joint = results.timeline()
    starts = []
    for timeline in joint.timelines:
        [index] = [i for i, ins in enumerate(timeline.trace) if ins.opcode.value == "collective"]
        starts.append(float(timeline.start_s[index]))
        assert "dma_cc" in timeline.lanes[timeline.lane[index]]
    assert max(starts) == pytest.approx(min(starts))  # everyone starts the collective together
    assert joint.waits_s[0] > 0 and joint.waits_s[3] == pytest.approx(0, abs=1e-12)
    assert joint.latency_s == pytest.approx(max(t.latency_s for t in joint.timelines))
    assert joint.write(tmp_path / "ranks.json").stat().st_size > 1000


@nki.jit
def gather_v_kernel(input, metadata, group, out_size):
    meta = hbm(metadata.shape, metadata.dtype, "meta")
    nisa.dma_copy(dst=meta, src=metadata)
    dst = hbm((out_size,), input.dtype, "dst")
    ncc.all_gather_v(srcs=[staged(input)], dsts=[dst], replica_group=group, metadata_tensor=meta)
    return returned(dst), returned(meta)


def test_all_gather_v_sends_each_ranks_chunk_into_equal_slots():
    ranks, slot = 4, 6
    xs = [np.arange(8, dtype=np.float32) + 100 * r for r in range(ranks)]
    counts = [1, 3, 6, 2]  # rank r sends xs[r][r : r + counts[r]]

    def metadata(rank):
        table = np.zeros((3, ranks), np.uint32)
        table[0, 0], table[1, 0] = counts[rank], rank
        return table

    results = system.launch(gather_v_kernel, ranks,
                            lambda r: (xs[r], metadata(r), group_of(ranks), slot * ranks))
    for out, meta in results:
        for sender in range(ranks):
            chunk = out[sender * slot:sender * slot + counts[sender]]
            assert np.array_equal(chunk, xs[sender][sender:sender + counts[sender]])
        assert list(meta[2]) == counts


@nki.jit
def to_all_v_kernel(input, metadata, group, out_size):
    meta = hbm(metadata.shape, metadata.dtype, "meta")
    nisa.dma_copy(dst=meta, src=metadata)
    dst = hbm((out_size,), input.dtype, "dst")
    zeros = nl.ndarray((1, out_size), dtype=input.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=dst, src=zeros)
    ncc.all_to_all_v(srcs=[staged(input)], dsts=[dst], replica_group=group, metadata_tensor=meta,
                     has_rdispls=metadata.shape[0] == 4)
    return returned(dst)


def _to_all_v(ranks, group_lists, target, has_rdispls):
    """Rank r sends j + 1 elements to the j-th member of its list, from offset 2j of its input."""
    width = len(group_lists[0])
    group = ncc.ReplicaGroup(group_lists)
    xs = [np.arange(4 * width, dtype=np.float32) + 1000 * r for r in range(ranks)]

    def metadata(rank):
        table = np.zeros((4 if has_rdispls else 3, width), np.uint32)
        table[0], table[1] = np.arange(1, width + 1), 2 * np.arange(width)
        if has_rdispls:
            table[3] = np.arange(width) * width  # packed: sender s's chunk at s * width
        return table

    results = system.launch(to_all_v_kernel, ranks, lambda r: (xs[r], metadata(r), group, width * width),
                            target=target)
    for members in group_lists:
        for j, rank in enumerate(members):
            for s, sender in enumerate(members):
                chunk = results[rank][s * width:s * width + j + 1]
                assert np.array_equal(chunk, xs[sender][2 * j:2 * j + j + 1])


def test_all_to_all_v_between_nodes_and_on_neuronswitch():
    _to_all_v(128, [[i, 64 + i] for i in range(64)], "trn2", has_rdispls=False)  # two trn2.48xlarge
    _to_all_v(8, [list(range(8))], "trn3", has_rdispls=True)  # two Trn3 devices, whole


def test_variable_collectives_refuse_what_nki_does():
    table = np.zeros((3, 4), np.uint32)
    with pytest.raises(UnsupportedError, match="inter-node rank-lists only"):
        system.launch(to_all_v_kernel, 4, lambda r: (np.zeros(16, np.float32), table, group_of(4), 16))
    with pytest.raises(UnsupportedError, match="4 ranks of one chip"):
        system.launch(gather_v_kernel, 8, lambda r: (np.zeros(8, np.float32), np.zeros((3, 8), np.uint32),
                                                     group_of(8), 48))


def test_collectives_in_a_launch_grid_are_refused():
    @nki.jit
    def gridded(input):
        ncc.rank_id()
        return returned(staged(input))

    with pytest.raises(UnsupportedError, match="launch grid \\[2\\]"):
        system.launch(gridded[2], 2, [np.zeros((4, 8), np.float32)] * 2)


def test_a_replica_group_naming_ranks_the_launch_lacks_is_refused():
    """A group of 4 ranks on a 2-rank launch failed with a raw IndexError."""
    xs = inputs(2)
    with pytest.raises(ArgumentError, match="names rank 3, but the launch has 2 ranks"):
        system.launch(all_reduce_kernel, 2, [(x, group_of(4), nl.add) for x in xs])


def test_an_all_reduce_adds_in_group_order_whatever_the_shape():
    """One-element tensors were summed pairwise by numpy (6.0 here), wider ones rank by rank (0.0)."""
    values = np.array([1e8, 1, 1, 1, 1, 1, 1, 1, 1, -1e8, 0, 0, 0, 0, 0, 0], np.float32)
    expected = np.float32(0)
    for value in values:
        expected = np.float32(expected + value)
    group = ncc.ReplicaGroup([list(range(16))])
    for shape in ((1, 1), (1, 2)):
        results = system.launch(all_reduce_kernel, 16, [(np.full(shape, v, np.float32), group, nl.add)
                                                        for v in values])
        assert all(np.array_equal(r, np.full(shape, expected)) for r in results)


@nki.jit
def two_calls_kernel(input, kind):
    group = ncc.ReplicaGroup([[0, 1]])
    src = staged(input)
    if kind == "gather":
        dst = hbm((input.shape[0] * 2, input.shape[1]), input.dtype, "dst")
        ncc.all_gather(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    else:
        dst = hbm(input.shape, input.dtype, "dst")
        op = nl.maximum if kind == "max" else nl.add
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=op)
    return returned(dst)


@pytest.mark.parametrize("per_rank, says", [
    ([(np.ones((2, 2), np.float32), ncc.ReplicaGroup([[0, 1]]), 2),
      (np.ones((2, 2), np.int32), ncc.ReplicaGroup([[0, 1]]), 2)], "int32"),
    ([(np.ones((2, 4), np.float32), ncc.ReplicaGroup([[0, 1]]), 2),
      (np.ones((4, 2), np.float32), ncc.ReplicaGroup([[0, 1]]), 2)], r"\(4, 2\)"),
])
def test_ranks_that_disagree_on_shapes_or_dtypes_are_refused(per_rank, says):
    """They were cast or reshaped into each other, silently."""
    with pytest.raises(KernelError, match=f"rank 1 is at all_gather with other operands.*{says}"):
        system.launch(all_gather_kernel, 2, per_rank)


@pytest.mark.parametrize("kinds, says", [(("add", "gather"), "rank 1 is at all_gather"),
                                         (("add", "max"), "'maximum'")])
def test_ranks_at_different_collectives_are_refused(kinds, says):
    with pytest.raises(KernelError, match=says):
        system.launch(two_calls_kernel, 2, [(np.ones((2, 2), np.float32), kind) for kind in kinds])


@pytest.mark.parametrize("sent, into", [(np.ones((1, 1), np.float32), np.ones((1, 3), np.float32)),
                                        (np.ones((1, 2), np.float32), np.ones((1, 2), np.int32))])
def test_a_permute_into_a_dst_of_another_size_or_dtype_is_refused(sent, into):
    """One element was broadcast into three; floats were converted into int32."""
    with pytest.raises(KernelError, match="rank 0 sends .* into a dst of"):
        system.launch(permute_kernel, 2, [(sent, [(0, 1)]), (into, [(0, 1)])])


def test_permute_ranks_outside_the_launch_are_refused():
    with pytest.raises(ArgumentError, match="name rank 5, but the launch has 2 ranks"):
        system.launch(permute_kernel, 2, [(np.ones((1, 2), np.float32), [(5, 0), (0, 1)])] * 2)
    with pytest.raises(ArgumentError, match="names rank 7, but the launch has 2 ranks"):
        system.launch(ring_kernel, 2, [(np.ones((1, 2), np.float32), ncc.ReplicaGroup([[0, 1, 7]]), 1)] * 2)


def test_a_permute_of_an_odd_number_of_bytes_is_timed():
    results = system.launch(permute_kernel, 2, [(np.ones((1, 3), np.uint8), [(0, 1), (1, 0)])] * 2)
    assert results.timeline().latency_s > 0
