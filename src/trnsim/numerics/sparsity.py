"""Structured N:M sparsity along the contraction axis (reference §2).

A pattern "m:n" keeps at most m non-zeros in every n consecutive elements along the axis (the
contraction dim of the stationary / weight operand). Trn2/Trn3 list 4:16 (the default), 4:12, 4:8,
2:8, 2:4, 1:4 and 1:2; n is at most 16 [N3][N4][N6]. The NKI guide writes the same patterns as
n:m ("16:4", the compression ratio); kept < group always, so either order names one pattern.
Compressed form: the kept values plus a 4-bit position of each within its group; four tags
pack into one uint16. The tag nibble order is undocumented, so it is a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.errors import FormatError
from trnsim.numerics import params

PATTERNS = ("4:16", "4:12", "4:8", "2:8", "2:4", "1:4", "1:2")  # Trn2/Trn3 hardware list [N3][N6]
DEFAULT_PATTERN = "4:16"
TAG_BITS = 4  # one position in a group of up to 16 [N6]
TAGS_PER_WORD = 4  # four tags per uint16 [N6]
TAG_ORDERS = ("low_first", "high_first")


@dataclass(frozen=True)
class SparsityPattern:
    """At most `kept` non-zeros in every `group` consecutive elements; only the hardware's exist."""

    kept: int
    group: int

    def __post_init__(self):
        if f"{self.kept}:{self.group}" not in PATTERNS:
            raise FormatError(f"{self.kept} kept of every {self.group} is not a hardware sparsity pattern",
                              hint=f"use one of {', '.join(PATTERNS)}")

    @property
    def name(self) -> str:
        return f"{self.kept}:{self.group}"

    @property
    def compression(self) -> float:
        return self.group / self.kept


def get_pattern(spec=DEFAULT_PATTERN) -> SparsityPattern:
    """A pattern from "m:n" or "n:m" (the NKI guide's "16:4" is 4:16), (m, n) or a SparsityPattern."""
    if isinstance(spec, SparsityPattern):
        return spec
    numbers = _pattern_numbers(spec)
    if numbers is None or f"{min(numbers)}:{max(numbers)}" not in PATTERNS:
        raise FormatError(f"unknown sparsity pattern {params.shown(spec)}",
                          hint=f"use one of {', '.join(PATTERNS)} (or n:m, such as 16:4)")
    return SparsityPattern(min(numbers), max(numbers))


def _pattern_numbers(spec) -> tuple[int, int] | None:
    """The two counts of "a:b" or (a, b), in the order given; None if spec is neither."""
    if isinstance(spec, str):
        parts = spec.split(":")
    elif isinstance(spec, tuple | list):
        parts = spec
    else:
        return None
    if len(parts) != 2:
        return None
    try:
        return tuple(params.integer(int(p) if isinstance(p, str) else p, "pattern") for p in parts)
    except (ValueError, FormatError):
        return None


def _group_axis(shape: tuple[int, ...], pattern: SparsityPattern, axis) -> int:
    """`axis` of `shape` as a non-negative int; FormatError if the group size does not divide it."""
    axis = params.axis(axis, shape)
    if shape[axis] % pattern.group:
        raise FormatError(f"pattern {pattern.name} needs axis {axis} (length {shape[axis]}) to be a "
                          f"multiple of {pattern.group}", hint="pad the contraction axis")
    return axis


def _split(x: np.ndarray, axis: int, size: int) -> np.ndarray:
    """View (..., len // size, size) of `x` with `axis` moved last."""
    moved = np.moveaxis(x, axis, -1)
    return moved.reshape(*moved.shape[:-1], moved.shape[-1] // size, size)


def _groups(w: np.ndarray, pattern: SparsityPattern, axis: int) -> tuple[np.ndarray, int]:
    """View (..., groups, n) with `axis` moved last; FormatError if n does not divide it."""
    axis = _group_axis(w.shape, pattern, axis)
    return _split(w, axis, pattern.group), axis


def _ungroup(groups: np.ndarray, axis: int) -> np.ndarray:
    return np.moveaxis(groups.reshape(*groups.shape[:-2], groups.shape[-2] * groups.shape[-1]), -1, axis)


def prune(w, pattern=DEFAULT_PATTERN, axis: int = 0) -> np.ndarray:
    """Keep the `m` largest magnitudes of every group (the earlier one wins a tie); zero the rest.

    NaN ranks above every magnitude, ±Inf included, so a NaN is kept and stays visible downstream
    rather than being pruned away (and |NaN| comparisons would otherwise decide nothing).
    """
    pattern = get_pattern(pattern)
    w = params.real_array(w, "w")
    groups, axis = _groups(w, pattern, axis)
    order = np.lexsort(_largest_first_keys(groups), axis=-1)  # stable: the earlier wins a tie
    keep = np.zeros(groups.shape, bool)
    np.put_along_axis(keep, order[..., :pattern.kept], True, axis=-1)
    return _ungroup(np.where(keep, groups, np.zeros((), w.dtype)), axis)


def _largest_first_keys(groups: np.ndarray) -> tuple[np.ndarray, ...]:
    """lexsort keys (it sorts by the last first) putting NaN, then larger magnitudes first. Integer
    magnitudes are compared exactly, as uint64: through float64 those above 2^53 would tie."""
    if groups.dtype.kind == "u":
        return (~groups.astype(np.uint64),)
    if groups.dtype.kind in "ib":
        return (~np.abs(groups.astype(np.int64)).view(np.uint64),)  # |-2^63| wraps to 2^63: exact
    magnitude = np.abs(groups.astype(np.float64))
    return (-magnitude, ~np.isnan(magnitude))


def find_violations(w, pattern=DEFAULT_PATTERN, axis: int = 0) -> list[tuple[tuple[int, ...], int]]:
    """Every group with too many non-zeros: (index of its first element in `w`, non-zero count)."""
    pattern = get_pattern(pattern)
    w = params.real_array(w, "w")
    groups, axis = _groups(w, pattern, axis)
    counts = np.count_nonzero(groups, axis=-1)
    found = []
    for where in zip(*np.nonzero(counts > pattern.kept), strict=True):
        *outer, group = (int(i) for i in where)
        index = tuple(outer[:axis]) + (group * pattern.group,) + tuple(outer[axis:])
        found.append((index, int(counts[where])))
    return found


def check_pattern(w, pattern=DEFAULT_PATTERN, axis: int = 0) -> None:
    """Raise FormatError naming where `w` breaks the pattern (nothing happens if it obeys)."""
    pattern = get_pattern(pattern)
    w = params.real_array(w, "w")
    axis = params.axis(axis, w.shape)
    bad = find_violations(w, pattern, axis)
    if bad:
        (index, count), more = bad[0], len(bad) - 1
        raise FormatError(f"not {pattern.name} sparse along axis {axis}: the group starting at index "
                          f"{index} has {count} non-zeros (at most {pattern.kept} allowed)"
                          + (f", and {more} more group(s) break it" if more else ""),
                          hint="prune() first, or choose a denser pattern")


@dataclass(frozen=True, kw_only=True, eq=False)
class SparseArray:
    """Compressed N:M data: `values` and `positions` (0..n-1 within each group) are the dense
    array with `axis` shortened by the compression ratio."""

    values: np.ndarray
    positions: np.ndarray
    pattern: SparsityPattern
    axis: int
    shape: tuple[int, ...]

    def __post_init__(self):
        """Refuse fields that disagree: decompress and sparse_matmul would otherwise index out of a
        group or, for a position kept twice, each silently give a different answer."""
        pattern = self.pattern
        if not isinstance(pattern, SparsityPattern):
            raise FormatError(f"SparseArray pattern must be a SparsityPattern, got {params.shown(pattern)}",
                              hint="use get_pattern(spec)")
        if not isinstance(self.shape, tuple):
            raise FormatError(f"SparseArray shape must be a tuple, got {params.shown(self.shape)}")
        kept_shape = [params.integer(n, "SparseArray shape", minimum=0) for n in self.shape]
        axis = _group_axis(tuple(kept_shape), pattern, self.axis)
        kept_shape[axis] = kept_shape[axis] // pattern.group * pattern.kept
        params.real_array(params.stored_array(self.values, "SparseArray values"), "SparseArray values")
        positions = params.integer_array(params.stored_array(self.positions, "SparseArray positions"),
                                         "SparseArray positions", minimum=0, maximum=pattern.group - 1)
        for name, field in (("values", self.values), ("positions", positions)):
            if field.shape != tuple(kept_shape):
                raise FormatError(f"SparseArray {name} has shape {field.shape}, but {pattern.name} "
                                  f"compression of {self.shape} along axis {axis} gives {tuple(kept_shape)}")
        if (np.diff(np.sort(_split(positions, axis, pattern.kept)), axis=-1) == 0).any():
            raise FormatError("SparseArray positions name one position twice within a group",
                              hint="each kept value needs its own position, as compress() gives")


def compress(w, pattern=DEFAULT_PATTERN, axis: int = 0) -> SparseArray:
    """Values and positions of the kept elements; groups with fewer non-zeros keep some zeros."""
    pattern = get_pattern(pattern)
    w = params.real_array(w, "w")
    check_pattern(w, pattern, axis)
    groups, axis = _groups(w, pattern, axis)
    order = np.argsort(groups == 0, axis=-1, kind="stable")[..., :pattern.kept]
    positions = np.sort(order, axis=-1)
    values = np.take_along_axis(groups, positions, axis=-1)
    return SparseArray(values=_ungroup(values, axis), positions=_ungroup(positions.astype(np.uint8), axis),
                       pattern=pattern, axis=axis, shape=w.shape)


def decompress(sparse: SparseArray) -> np.ndarray:
    """The dense array again (exactly)."""
    _check_sparse(sparse)
    pattern = sparse.pattern
    values = _split(sparse.values, sparse.axis, pattern.kept)
    positions = _split(sparse.positions, sparse.axis, pattern.kept).astype(np.intp)
    dense = np.zeros((*values.shape[:-1], pattern.group), sparse.values.dtype)
    np.put_along_axis(dense, positions, values, axis=-1)
    return _ungroup(dense, sparse.axis)


def pack_tags(positions, order: str = "low_first") -> np.ndarray:
    """Four 4-bit positions per uint16 along the last axis (tag 0 in the low nibble by default)."""
    shifts = _tag_shifts(order)
    tags = params.integer_array(positions, "positions", minimum=0, maximum=(1 << TAG_BITS) - 1)
    if tags.ndim == 0 or tags.shape[-1] % TAGS_PER_WORD:
        raise FormatError(f"tag packing needs a last axis divisible by {TAGS_PER_WORD}, "
                          f"got shape {tags.shape}")
    tags = tags.astype(np.uint16)
    grouped = tags.reshape(*tags.shape[:-1], tags.shape[-1] // TAGS_PER_WORD, TAGS_PER_WORD)
    return np.bitwise_or.reduce(grouped << shifts, axis=-1).astype(np.uint16)


def unpack_tags(packed, order: str = "low_first") -> np.ndarray:
    shifts = _tag_shifts(order)
    words = params.integer_array(packed, "packed", minimum=0, maximum=0xFFFF).astype(np.uint16)[..., None]
    if words.ndim < 2:
        raise FormatError("packed needs at least one axis of tag words, got a scalar")
    tags = (words >> shifts) & np.uint16((1 << TAG_BITS) - 1)
    return tags.reshape(*tags.shape[:-2], tags.shape[-2] * tags.shape[-1]).astype(np.uint8)


def _tag_shifts(order: str) -> np.ndarray:
    params.choice(order, "tag order", TAG_ORDERS)
    shifts = np.arange(TAGS_PER_WORD, dtype=np.uint16) * TAG_BITS
    return shifts if order == "low_first" else shifts[::-1].copy()


def sparse_matmul(a, sparse: SparseArray, *, max_gather_elements: int = 1 << 24) -> np.ndarray:
    """a [M, K] @ W [K, N] with W compressed along K (axis 0), in float32, reading only kept values."""
    a = params.real_array(a, "a").astype(np.float32)
    _check_sparse(sparse)
    max_gather_elements = params.integer(max_gather_elements, "max_gather_elements", minimum=1)
    if sparse.axis != 0 or len(sparse.shape) != 2 or a.ndim != 2 or a.shape[1] != sparse.shape[0]:
        raise FormatError(f"sparse_matmul needs a [M, K] times a [K, N] compressed along axis 0; got "
                          f"{a.shape} and {sparse.shape} compressed along axis {sparse.axis}")
    kept, group = sparse.pattern.kept, sparse.pattern.group
    compressed_rows = sparse.values.shape[0]
    rows = (np.arange(compressed_rows)[:, None] // kept) * group + sparse.positions.astype(np.intp)
    values = sparse.values.astype(np.float32)
    out = np.empty((a.shape[0], sparse.shape[1]), np.float32)
    step = max(1, max_gather_elements // max(1, a.shape[0] * compressed_rows))
    for col in range(0, sparse.shape[1], step):
        cols = slice(col, col + step)
        gathered = a[:, rows[:, cols]]  # [M, K/CR, cols]
        out[:, cols] = np.einsum("mkn,kn->mn", gathered, values[:, cols], dtype=np.float32)
    return out


def _check_sparse(sparse) -> None:
    if not isinstance(sparse, SparseArray):
        raise FormatError(f"sparse must be a SparseArray (from compress), got {type(sparse).__name__}")
