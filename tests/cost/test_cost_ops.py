"""trnsim.cost: the fast tier agrees with the exact one, predictions respect the roofline, and what
cannot be costed fails with a TrnsimError naming it."""

import time

import numpy as np
import pytest

from trnsim import cost
from trnsim.core.runtime import current as current_runtime
from trnsim.cost import blocked
from trnsim.errors import ConfigError, ShapeError, SpecError, TrnsimError, UnsupportedError


@pytest.fixture
def clip(monkeypatch):
    """Set one of blocked's clip limits for one test: the fast tier's cache does not know them,
    so it is emptied before and after."""
    current_runtime().reset()
    yield lambda name, tiles: monkeypatch.setattr(blocked, name, tiles)
    current_runtime().reset()

# Shapes whose tile grids exceed blocked.CLIP_TILES, so the fast tier extrapolates rather than
# tracing them in full (smaller grids are traced exactly by both tiers).
EXTRAPOLATED = [
    ("matmul", (2000, 3000, 1000)),      # 16 x 24 x 2 tiles, DMA-bound
    ("matmul", (4096, 256, 16384)),      # short contraction: output stores wait on the engines
    ("elementwise", (600 * 65536, 2)),   # 600 streaming tiles, two inputs
    ("norm", (8192, 8192)),              # 64 x 16 row tiles; dependencies leave the DMA gaps
    ("optimizer_step", (600 * 65536,)),
]


@pytest.mark.parametrize(("family", "args"), EXTRAPOLATED)
def test_fast_tier_within_5_percent_of_exact(family, args):
    fast = cost.op(family, *args)
    exact = cost.op(family, *args, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.05)
    assert (fast.flops, fast.bytes) == (exact.flops, exact.bytes)


@pytest.mark.parametrize(("shape", "dtype"), [((6037, 177, 7512), "float8_e4m3"),
                                             ((4587, 354, 7168), "float8_e4m3"),
                                             ((7040, 374, 8192), "bfloat16"),
                                             ((4099, 129, 4099), "bfloat16")])
def test_fast_matmul_with_a_short_contraction_follows_its_column_tiles(shape, dtype):
    """With two or three contraction tiles, each column tile of the output loads, multiplies and
    stores in a few microseconds and DMA waits for the stores a fixed share of each: the grid
    clipped along every axis gave its fill and drain only, 21%, 10%, 5% and 21% short."""
    fast = cost.matmul(*shape, dtype=dtype)
    exact = cost.matmul(*shape, dtype=dtype, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)


@pytest.mark.parametrize(("shape", "rows"), [((1280, 4096, 512), ([10, 32, 1], None)),  # no larger: whole
                                            ((2048, 4096, 1024), ([8, 32, 2], [6, 32, 2]))])
def test_fast_matmul_with_few_column_tiles_follows_whole_rows(shape, rows):
    """Each column tile starts by loading its moving block, one tile per contraction step, while
    TensorE waits: a fill that grows with the contraction, which the one grid cut (fp8: 10% and
    5% short)."""
    counts = [n for n, _last in blocked._tiling(shape, (128, 128, 512))]
    assert blocked._grids(cost.ops._matmul_op("float8_e4m3", (128, 128, 512)), counts, 1, 16) == rows
    fast = cost.matmul(*shape, dtype="float8_e4m3")
    exact = cost.matmul(*shape, dtype="float8_e4m3", tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)


def test_fast_matmul_at_lnc2_follows_whole_rows_with_each_core_its_column_tiles():
    """fp8 (1536, 6300, 648) at LNC=2: two column tiles, one per core, 50 contraction tiles; the
    grids of clipped rows and contraction came out 10% short."""
    fast = cost.matmul(1536, 6300, 648, dtype="float8_e4m3", lnc=2)
    exact = cost.matmul(1536, 6300, 648, dtype="float8_e4m3", lnc=2, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)


@pytest.mark.parametrize(("shape", "dtype", "target", "lnc"), [
    ((3841, 1536, 1024), "bfloat16", "trn3", 1), ((666, 7447, 2048), "float8_e4m3", "trn2", 2)])
def test_fast_matmul_rows_beyond_the_first_fill(shape, dtype, target, lnc):
    """bf16 on trn3 still filled between 4 and 6 rows: grids of 8 and 4 rows came out 14% over.
    Six rows of 59 contraction tiles at LNC=2 had no row grids and the one grid was 9% short;
    no larger than the two grids, it is traced whole."""
    fast = cost.matmul(*shape, dtype=dtype, target=target, lnc=lnc)
    exact = cost.matmul(*shape, dtype=dtype, target=target, lnc=lnc, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.03)


def test_a_matmul_whose_one_grid_keeps_its_contraction_keeps_the_one_grid():
    """bf16 (6912, 541, 1536) at LNC=2 (5 contraction tiles): the one grid cuts only rows, and
    grids of whole rows put it 7% over."""
    counts = [54, 5, 3]
    op = cost.ops._matmul_op("bfloat16", (128, 128, 512))
    assert blocked._row_grids(op, counts, blocked._clipped_counts(op, counts, 2, 32)) is None


def test_fast_matmul_at_lnc2_takes_whole_column_tiles_where_one_core_holds_few():
    """fp8 (1024, 7552, 3446) at LNC=2: 59 contraction tiles by 8 rows make a column tile 472
    tiles, so OUTER_CLIP_TILES held no two grids of whole ones; the grid clipped along every axis
    halved the contraction for its slope and came out 6% short."""
    op = cost.ops._matmul_op("float8_e4m3", (128, 128, 512))
    assert blocked._outer_grids(op, [8, 59, 7], 2) == ([8, 59, 5], [8, 59, 3])  # 2360 and 1416 tiles
    fast = cost.matmul(1024, 7552, 3446, dtype="float8_e4m3", lnc=2)
    exact = cost.matmul(1024, 7552, 3446, dtype="float8_e4m3", lnc=2, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)


@pytest.mark.parametrize(("shape", "lnc"), [((1166, 625, 2406), 2), ((1152, 5376, 1537), 1)])
def test_fast_matmul_prefers_rows_then_a_small_grid_whole_to_few_column_tiles(shape, lnc):
    """fp8 (1166, 625, 2406) at LNC=2 has 250 tiles, and grids of 3 and 1 of its 5 column tiles
    put it 5.1% over; fp8 (1152, 5376, 1537) at one core (4 column tiles, 9 rows) was measured
    on 2 and 1 column tiles before its rows were looked at, and came out 5.5% short."""
    assert cost.matmul(*shape, dtype="float8_e4m3", lnc=lnc).seconds == \
        cost.matmul(*shape, dtype="float8_e4m3", lnc=lnc, tier="exact").seconds


@pytest.mark.parametrize("shape", [(128, 128, 1025), (1000, 128, 1536), (1, 1792, 4096)])
def test_fast_matmul_traces_a_grid_no_larger_than_its_extrapolation_whole(shape):
    """Two grids of column tiles were traced even where the full grid is smaller than both, and
    from a last column tile one column wide the slope was 79% over."""
    assert cost.matmul(*shape).seconds == cost.matmul(*shape, tier="exact").seconds


def test_fast_tier_follows_a_bound_that_moves_from_dma_to_tensor():
    """An fp8 matmul's clipped grid reloads moving tiles more often than the full grid, so DMA
    bounds the clipped grid and TensorE the full one: extrapolating DMA's line alone came out 5%
    short here (9% at 4096^3)."""
    fast = cost.matmul(2048, 2048, 4096, dtype="float8_e4m3")
    exact = cost.matmul(2048, 2048, 4096, dtype="float8_e4m3", tier="exact")
    assert fast.bound == exact.bound == "tensor"
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)


def test_fast_matmul_one_column_wider_costs_more():
    """A slope measured by halving the longest axis, a matmul's contraction here, came out 14%
    steep, the fast tier 6% off the exact one, and one more column cheaper than one fewer."""
    fast = cost.matmul(1024, 1024, 4097)
    exact = cost.matmul(1024, 1024, 4097, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)
    assert fast.seconds > cost.matmul(1024, 1024, 4096).seconds


def test_fast_softmax_clips_rows_before_the_chain_of_column_tiles(clip):
    """Each row tile reduces its column tiles one after another, then rescales them: clipping the
    longest axis first cut that chain short, and the slope measured across row tiles came out
    steep (9% over exact for softmax over 8192 x 32000)."""
    clip("SLOPE_CLIP_TILES", 64)
    fast = cost.softmax(2048, 8000)  # 16 x 16 tiles: traced as 4 x 16 and 2 x 16
    exact = cost.softmax(2048, 8000, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)


@pytest.mark.parametrize(("family", "args", "dtype"), [
    ("matmul", (2048, 2048, 2560), "bfloat16"),  # 5 column tiles: 3 on one core, 2 on the other (-14%)
    ("softmax", (640, 64000), "bfloat16"),       # outermost axis first left 2 row tiles, then 1 (-19%)
    ("matmul", (5632, 150, 7195), "bfloat16"),   # 15 column tiles of a short contraction (+17%)
    ("matmul", (1280, 1839, 4608), "float8_e4m3"),  # 9 column tiles, clipped along the contraction (-8%)
    # TensorE bounds the full grid, DMA the clipped ones, and the core with 3 of the 5 column
    # tiles does 1.2x the average: from the average busy time the fast tier was 16% short
    ("matmul", (3613, 4467, 2560), "float8_e4m3"),
    # 4 column tiles: the second core's last one is 511 columns of 4 bytes, under 2 KiB a row,
    # and pays the small-transfer rate, so that core has more DMA work than the first (-9%)
    ("matmul", (8192, 384, 2047), "float32"),
    # 55 row tiles, the last partial; clipped to 13 and halved to 6, the partial tile moved to
    # the other core (+23%)
    ("reduction", (6917, 10000), "float8_e4m3"),
    # 16 row tiles of 71 column tiles: halving the longest axis cut each row's chain (+61%)
    ("softmax", (2000, 36352), "bfloat16"),
])
def test_fast_tier_at_lnc2_measures_a_slope_over_both_cores(family, args, dtype):
    """The two cores of LNC=2 split the outermost loop: with an odd count, the core with one tile
    more decides the latency, so the fast tier follows that core's busy time, not the average."""
    fast = cost.op(family, *args, dtype=dtype, lnc=2)
    exact = cost.op(family, *args, dtype=dtype, lnc=2, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.03)


@pytest.mark.parametrize("causal", [False, True])
def test_fast_attention_at_lnc2_keeps_a_query_group_per_core_in_both_grids(clip, causal):
    """8 groups clipped to 2 and halved to 1 left a core idle in the smaller grid: both grids took
    as long, the slope came out 0, and the fast tier 34-36% short (49% for causal attention over
    (1, 16, 4096, 4096, 128), whose only clippable axis is the groups)."""
    clip("SLOPE_CLIP_TILES", 16)
    fast = cost.attention(1, 8, 512, 1024, 64, causal=causal, lnc=2)
    exact = cost.attention(1, 8, 512, 1024, 64, causal=causal, lnc=2, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.03)


@pytest.mark.parametrize("lnc", [1, 2])
def test_fast_elementwise_keeps_the_last_partial_wave_of_transfers(lnc):
    """113 one-input tiles: clipped to 64, the grid ended on a full wave of DMA transfers where the
    full one has one more tile to wait for (at 65 tiles 17% short, 30% at LNC=2)."""
    fast = cost.elementwise(113 * 65536, 1, lnc=lnc)
    exact = cost.elementwise(113 * 65536, 1, lnc=lnc, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.02)


def test_fast_tier_extrapolates_these_shapes():
    counts = blocked._tiling((2000, 3000, 1000), cost.ops._matmul_tiles("trn2"))
    assert [n for n, _last in counts] == [16, 24, 2]
    assert 16 * 24 * 2 > blocked.CLIP_TILES


def test_a_large_fast_matmul_is_microseconds_once_its_tile_grid_is_traced():
    first = cost.matmul(8192, 8192, 28672)
    started = time.perf_counter()
    again = cost.matmul(8192, 8192, 28672)
    assert time.perf_counter() - started < 0.005
    assert again == first and first.seconds > first.lower_bound_seconds


SMALL = {
    "matmul": (300, 200, 700), "attention": (1, 2, 256, 256, 64), "elementwise": (5000, 3),
    "norm": (200, 1000), "softmax": (130, 520), "reduction": (64, 4096), "copy": (70000,),
    "embedding": (100, 512), "optimizer_step": (100_000,),
}


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("family", sorted(SMALL))
def test_every_prediction_respects_the_roofline(family, target):
    found = cost.op(family, *SMALL[family], target=target)
    assert found.seconds >= found.lower_bound_seconds > 0
    assert found.op == family and found.target == target and found.tier == "fast"
    assert found.bound in {"tensor", "vector", "scalar", "gpsimd", "dma"}


@pytest.mark.parametrize("family", ["matmul", "elementwise", "norm", "attention"])
def test_a_logical_core_of_two_halves_the_roofline_and_the_time(family):
    args = {"matmul": (2048, 2048, 2048), "elementwise": (4096 * 4096, 2), "norm": (4096, 4096),
            "attention": (1, 4, 1024, 1024, 128)}[family]
    one, two = cost.op(family, *args), cost.op(family, *args, lnc=2)
    assert two.lower_bound_seconds == pytest.approx(one.lower_bound_seconds / 2)
    assert one.seconds / 2 * 0.9 < two.seconds < one.seconds
    assert two.seconds > two.lower_bound_seconds


def test_a_logical_core_of_two_extrapolates_like_one():
    """Busy time is averaged over both cores' lanes, used or not, so a one-tile corner of the grid
    (one core idle) extrapolates linearly too."""
    fast = cost.elementwise(4096 * 4096, 2, lnc=2)   # 256 streaming tiles: clipped to 64
    exact = cost.elementwise(4096 * 4096, 2, lnc=2, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.05)


def test_roofline_of_a_large_matmul_is_its_flops_at_peak():
    found = cost.matmul(8192, 8192, 8192, target="trn2")
    assert found.flops == 2 * 8192**3
    assert found.lower_bound_seconds == pytest.approx(found.flops / 79e12)  # trn2 bf16 peak per core
    assert found.seconds < 3 * found.lower_bound_seconds


def test_causal_attention_skips_the_key_blocks_after_the_queries():
    full = cost.attention(1, 2, 1024, 1024, 128, causal=False)
    causal = cost.attention(1, 2, 1024, 1024, 128, causal=True)
    assert 0.5 < causal.seconds / full.seconds < 0.9  # half the blocks; the diagonal ones are masked
    assert causal.flops == pytest.approx(full.flops * (1 - 1023 / 2048))


@pytest.mark.parametrize("causal", [False, True])
def test_fast_attention_extrapolates_over_query_groups(clip, causal):
    clip("SLOPE_CLIP_TILES", 32)  # 8 groups x 4 query tiles x 2 key blocks
    fast = cost.attention(2, 4, 512, 1024, 64, causal=causal)
    exact = cost.attention(2, 4, 512, 1024, 64, causal=causal, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.05)


def test_causal_attention_whose_one_group_exceeds_the_clip_keeps_two_groups(clip):
    """Only query groups may be clipped in a causal grid; one group of 4 query tiles x 2 key blocks
    is already over the clip, so the traced grid keeps two groups (one would leave no second grid
    for the slope: it was a ShapeError, then 21% off exact at 8192 x 8192)."""
    clip("SLOPE_CLIP_TILES", 4)
    fast = cost.attention(1, 8, 512, 1024, 64, causal=True)
    exact = cost.attention(1, 8, 512, 1024, 64, causal=True, tier="exact")
    assert fast.seconds == pytest.approx(exact.seconds, rel=0.05)


def test_grouped_query_attention_reads_fewer_kv_bytes():
    grouped = cost.attention(1, 32, 1024, 1024, 128, kv_heads=8)
    assert grouped.bytes < cost.attention(1, 32, 1024, 1024, 128).bytes


@pytest.mark.parametrize(("call", "error", "named"), [
    (lambda: cost.op("convolution3d", 1, 2), UnsupportedError, "convolution3d"),
    (lambda: cost.matmul(0, 128, 128), ShapeError, "cost.matmul: m"),
    (lambda: cost.matmul(128, 1.5, 128), ShapeError, "cost.matmul: k"),
    (lambda: cost.norm(128, 128, dtype="float64"), ConfigError, "float64"),
    (lambda: cost.softmax(128, 128, tier="approximate"), ConfigError, "approximate"),
    (lambda: cost.elementwise(128, engine="tensor"), ConfigError, "tensor"),
    (lambda: cost.norm(128, 128, lnc=4), ConfigError, r"^cost\.norm: lnc=4"),  # said "cost:"
    (lambda: cost.embedding(10, 10, dtype="bad"), ConfigError, r"^cost\.embedding: dtype"),  # "cost.copy"
    (lambda: cost.attention(1, 6, 128, 128, 64, kv_heads=4), ShapeError, "kv_heads"),
    (lambda: cost.attention(1, 1, 4096, 1, 128), ShapeError, "above kv_len"),  # gave negative FLOPs
    (lambda: cost.attention(1, 1, 4, 8, 128, causal="no"), ConfigError, "causal='no'"),
    (lambda: cost.op("matmul", 1, 1, 1, foo=2), ConfigError, "unexpected keyword argument 'foo'"),
    (lambda: cost.op("matmul", 1), ConfigError, "missing a required argument"),
    (lambda: cost.op([]), UnsupportedError, "no op family"),
])
def test_what_cannot_be_costed_fails_naming_it(call, error, named):
    with pytest.raises(error, match=named) as raised:
        call()
    assert isinstance(raised.value, TrnsimError)


def test_unknown_target_is_the_catalogs_error():
    with pytest.raises(SpecError, match=r"^cost\.matmul: unknown core 'trn9'"):
        cost.matmul(128, 128, 128, target="trn9")


def test_numpy_integers_are_sizes_too():
    assert cost.matmul(np.int64(256), 128, 512).seconds == cost.matmul(256, 128, 512).seconds


def test_cross_attention_may_have_more_queries_than_keys():
    found = cost.attention(1, 2, 512, 128, 64, causal=False)
    assert found.seconds > 0 and found.flops == 4.0 * 2 * 512 * 128 * 64


def test_lnc2_exists_only_from_trn2_on():
    """trn1 and inf2 matmuls came out twice as fast at lnc=2 (fabrics.toml: LNC=2 from trn2 on)."""
    for target in ("trn1", "inf2"):
        with pytest.raises(ConfigError, match="lnc=2 on"):
            cost.matmul(1024, 1024, 1024, target=target, lnc=2)
    assert cost.matmul(1024, 1024, 1024, target="trn2", lnc=2).seconds > 0


def test_fp8_on_trn3_is_bounded_by_its_16_bit_rate():
    """NeuronCore-v4 publishes an MXFP8 peak only: the roofline raised KeyError('fp8')."""
    fp8 = cost.matmul(2048, 2048, 2048, dtype="float8_e4m3", target="trn3")
    bf16 = cost.matmul(2048, 2048, 2048, dtype="bfloat16", target="trn3")
    assert fp8.lower_bound_seconds >= bf16.lower_bound_seconds * 0.5 and fp8.seconds > 0


def test_sizes_too_large_for_int64_shapes_are_refused_by_name():
    """A serving plan with compiled_batch=10**30 reached the kernel as a negative shape."""
    with pytest.raises(ShapeError, match=r"cost\.matmul: sizes .* are too large to cost"):
        cost.matmul(2**31, 2**31, 2**31)
