"""N:M structured sparsity: prune, check (with where it breaks), compress/decompress, tags, matmul."""

import numpy as np
import pytest

from trnsim import FormatError
from trnsim.numerics.sparsity import (
    PATTERNS,
    SparseArray,
    check_pattern,
    compress,
    decompress,
    find_violations,
    get_pattern,
    pack_tags,
    prune,
    sparse_matmul,
    unpack_tags,
)


def random_sparse(pattern, shape, seed):
    """A random tensor obeying the pattern along axis 0, some groups with fewer non-zeros."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w[rng.random(shape) < 0.1] = 0
    return prune(w, pattern, axis=0)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_prune_keeps_the_largest_and_round_trips(pattern):
    p = get_pattern(pattern)
    w = np.random.default_rng(0).standard_normal((48, 10)).astype(np.float32)
    pruned = prune(w, pattern)
    groups = np.abs(w).reshape(-1, p.group, 10)
    kept = np.abs(pruned).reshape(-1, p.group, 10)
    assert np.all(np.count_nonzero(kept, axis=1) == p.kept)
    assert np.all(kept.max(axis=1) == groups.max(axis=1))
    assert np.array_equal(np.sort(kept, axis=1)[:, -p.kept:], np.sort(groups, axis=1)[:, -p.kept:])
    check_pattern(pruned, pattern)
    sparse = compress(pruned, pattern)
    assert sparse.values.shape == (48 * p.kept // p.group, 10)
    assert np.array_equal(decompress(sparse), pruned)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_random_masks_round_trip_exactly_on_other_axes(pattern):
    w = np.moveaxis(random_sparse(pattern, (48, 3, 5), seed=1), 0, 2)
    sparse = compress(w, pattern, axis=2)
    assert np.array_equal(decompress(sparse), w)
    assert sparse.positions.max() < get_pattern(pattern).group


def test_a_broken_pattern_is_reported_with_where_it_breaks():
    w = prune(np.random.default_rng(3).standard_normal((32, 4)), "4:16")
    w[16:32, 2] = 0
    w[[16, 18, 20, 25, 31], 2] = 1.0  # five non-zeros in the second group of column 2
    assert find_violations(w, "4:16") == [((16, 2), 5)]
    with pytest.raises(FormatError, match=r"group starting at index \(16, 2\) has 5 non-zeros"):
        check_pattern(w, "4:16")
    with pytest.raises(FormatError, match="not 4:16 sparse"):
        compress(w, "4:16")


@pytest.mark.parametrize("bad, match", [(dict(pattern="3:16"), "unknown sparsity pattern"),
                                        (dict(pattern="2:8", axis=1), "multiple of 8")])
def test_bad_patterns_and_shapes_are_format_errors(bad, match):
    with pytest.raises(FormatError, match=match):
        prune(np.ones((16, 12)), **bad)


@pytest.mark.parametrize("order", ["low_first", "high_first"])
def test_tags_pack_four_per_uint16(order):
    positions = compress(random_sparse("4:16", (128, 128), seed=2), "4:16").positions
    packed = pack_tags(positions.T, order=order)
    assert packed.shape == (128, 8) and packed.dtype == np.uint16
    assert np.array_equal(unpack_tags(packed, order=order), positions.T)
    low = int(pack_tags(np.uint8([[1, 2, 3, 4]]))[0, 0])
    assert low == 0x4321


@pytest.mark.parametrize("pattern", ["4:16", "2:4", "1:2"])
def test_sparse_matmul_equals_the_dense_product_of_the_pruned_matrix(pattern):
    rng = np.random.default_rng(5)
    w = prune(rng.integers(-8, 8, (64, 24)).astype(np.float32), pattern)
    a = rng.integers(-8, 8, (16, 64)).astype(np.float32)
    sparse = compress(w, pattern)
    assert np.array_equal(sparse_matmul(a, sparse, max_gather_elements=1000), a @ w)  # small ints: exact
    a2 = rng.standard_normal((16, 64)).astype(np.float32)
    w2 = random_sparse(pattern, (64, 24), seed=6)
    np.testing.assert_allclose(sparse_matmul(a2, compress(w2, pattern)), a2.astype(np.float64) @ w2,
                               rtol=1e-5, atol=1e-5)


def test_prune_keeps_nan_as_the_largest_magnitude():
    """NaN ranks above ±Inf and every number; between NaNs the earlier one wins."""
    w = np.float32([[1, np.nan, 3, -np.inf], [2, 5, 0, np.nan], [np.nan, 7, np.nan, np.nan]])
    kept = prune(w, "2:4", axis=1)
    expected = np.float32([[0, np.nan, 0, -np.inf], [0, 5, 0, np.nan], [np.nan, 0, np.nan, 0]])
    assert np.array_equal(kept, expected, equal_nan=True)
    check_pattern(kept, "2:4", axis=1)
    assert np.array_equal(decompress(compress(kept, "2:4", axis=1)), kept, equal_nan=True)


def test_prune_compares_integer_magnitudes_exactly():
    """Through float64, 2^53 and 2^53 + 1 tie (and the earlier, smaller one was kept)."""
    big = np.array([2**53, 2**53 + 1, 0, 0, 2**64 - 2, 2**64 - 1, 0, 0], np.uint64)
    assert prune(big, "1:4").tolist() == [0, 2**53 + 1, 0, 0, 0, 2**64 - 1, 0, 0]
    signed = np.array([2**62, -(2**62) - 1, 0, 0, 2**63 - 1, -(2**63), 0, 0], np.int64)
    assert prune(signed, "1:4").tolist() == [0, -(2**62) - 1, 0, 0, 0, -(2**63), 0, 0]


MALFORMED_SPARSE_FIELDS = [  # field: a value that does not fit the 2:4 compression of a 16 x 8 matrix
    ("positions", np.zeros((8, 8), np.uint8), "positions name one position twice within a group"),
    ("positions", np.full((8, 8), 7, np.uint8), r"positions must lie in 0\.\.3, got 7"),
    ("positions", np.zeros((8, 8)), "positions must hold integers"),
    ("values", np.zeros((4, 8), np.float32), r"values has shape \(4, 8\).*gives \(8, 8\)"),
    ("values", [[0.0] * 8] * 8, "values must be a numpy array"),
    ("pattern", "2:4", "pattern must be a SparsityPattern"),
    ("shape", (15, 8), r"needs axis 0 \(length 15\) to be a multiple of 4"),
    ("shape", [16, 8], "shape must be a tuple"),
    ("axis", 2, "axis 2 does not exist"),
]


@pytest.mark.parametrize("field, value, match", MALFORMED_SPARSE_FIELDS)
def test_a_malformed_sparse_array_is_refused_naming_the_field(field, value, match):
    """Positions kept twice in a group made decompress and sparse_matmul disagree silently."""
    good = compress(random_sparse("2:4", (16, 8), seed=7), "2:4")
    fields = dict(values=good.values, positions=good.positions, pattern=good.pattern, axis=0, shape=(16, 8))
    with pytest.raises(FormatError, match=match):
        SparseArray(**{**fields, field: value})
    assert np.array_equal(decompress(SparseArray(**fields)), decompress(good))


@pytest.mark.parametrize("spelling", ["16:4", " 16 : 4 ", (16, 4), [4, 16], "4:16"])
def test_the_nki_guides_n_to_m_spelling_names_the_same_pattern(spelling):
    pattern = get_pattern(spelling)
    assert (pattern.kept, pattern.group, pattern.name) == (4, 16, "4:16")


@pytest.mark.parametrize("name", PATTERNS)
def test_every_pattern_reversed_means_the_same(name):
    kept, group = name.split(":")
    assert get_pattern(f"{group}:{kept}") == get_pattern(name)
    w = np.random.default_rng(0).standard_normal((48, 8)).astype(np.float32)
    assert np.array_equal(prune(w, f"{group}:{kept}"), prune(w, name))


@pytest.mark.parametrize("spelling", ["3:16", "16:3", "4:4", "4", "a:b", "16:4:1", (4.0, 16), (True, 2),
                                      None])
def test_other_spellings_are_refused(spelling):
    with pytest.raises(FormatError, match="unknown sparsity pattern"):
        get_pattern(spelling)
