"""Op families -> the built-in kernels that run them, timed at the `exact` or `fast` tier.

Each family is one or more `Blocked` kernel launches (cost/blocked.py). Arguments are checked
here, so a shape the library cannot cost fails with a `TrnsimError` naming the op. `flops` counts
Tensor Engine work (2 per multiply-add of a matmul); `bytes` the compulsory HBM traffic.
"""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np

from trnsim import hardware
from trnsim.cost import blocked
from trnsim.cost.blocked import Blocked, Timed
from trnsim.cost.kernels import ATTENTION_KEYS, STREAM_FREE
from trnsim.cost.opcost import OpCost, roofline_seconds
from trnsim.errors import ConfigError, ShapeError, TrnsimError, UnsupportedError
from trnsim.nki.jit import TensorSpec
from trnsim.timing.costs import core_spec

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3": 1, "float8_e5m2": 1,
               "int32": 4, "int16": 2, "int8": 1, "uint8": 1}
"""The dtypes the engines store, and their sizes in bytes."""

TIERS = ("fast", "exact")
ENGINE_OPS = {"vector": "tensor", "scalar": "activation"}
"""Elementwise engine -> the `stream` kernel's op (VectorE tensor ops, ScalarE activations)."""


MAX_ELEMENTS = 2**62
"""The largest product of an op's sizes it costs: its tensors' shapes are int64 arithmetic."""


def _positive(op: str, **sizes) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise ShapeError(f"cost.{op}: {name} must be a positive integer, got {value!r}")
    if math.prod(int(value) for value in sizes.values()) >= MAX_ELEMENTS:
        raise ShapeError(f"cost.{op}: sizes {sizes} are too large to cost (their product reaches 2^62)")


def _checked(op: str, target: str, dtype: str, tier: str, lnc: int, **sizes) -> None:
    """Every argument an op family takes besides its own options, each refusal naming `cost.<op>`
    (an unknown target is the catalog's SpecError, with the op named in front)."""
    try:
        core = core_spec(target)
    except TrnsimError as error:
        raise error.locate(None, f"cost.{op}") from None
    _positive(op, **sizes)
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"cost.{op}: dtype {dtype!r} is not one the engines store",
                          hint=f"one of {', '.join(DTYPE_BYTES)}")
    if tier not in TIERS:
        raise ConfigError(f"cost.{op}: tier {tier!r} is unknown", hint="tier='fast' or tier='exact'")
    if lnc not in (1, 2):
        raise ConfigError(f"cost.{op}: lnc={lnc!r}; a logical core is one or two physical cores",
                          hint="lnc=1 or lnc=2")
    if lnc == 2 and not hardware.has_lnc2(core):
        raise ConfigError(f"cost.{op}: lnc=2 on {target}: no system of the catalog runs its NeuronCores as "
                          f"logical cores of two (LNC=2 exists from trn2 on)", hint="lnc=1")


def _matmul_tiles(target: str) -> tuple[int, int, int]:
    """The kernel's tiles (nl.tile_size): stationary free (rows of C), contraction, moving free."""
    core = core_spec(target)
    return core.matmul_max_stationary_free, core.partitions, core.matmul_max_moving_free


@functools.cache
def _matmul_op(dtype: str, tiles: tuple[int, int, int]) -> Blocked:
    """C[m, n] = A[m, k] @ B[k, n]: the kernel takes A transposed, lhsT[k, m], and B[k, n]. Its
    outermost loop walks the column tiles of C (n), the loop inside it the row tiles (m)."""
    def args(dims):
        m, k, n = dims
        return TensorSpec((k, m), dtype), TensorSpec((k, n), dtype)
    return Blocked("matmul", tiles, args, outer=2, rows=0)


@functools.cache
def _attention_op(dtype: str, depth: int, causal: bool) -> Blocked:
    """The fused flash-attention kernel over (groups, queries, keys); each query group reads its
    own keys and values (grouped-query sharing saves HBM bytes, not kernel time, in this kernel).
    A causal grid is clipped only along the groups: its key blocks differ per query tile."""
    def args(dims):
        groups, q_len, kv_len = dims
        return (TensorSpec((groups, depth, q_len), dtype), TensorSpec((groups, depth, kv_len), dtype),
                TensorSpec((groups, kv_len, depth), dtype), causal)
    return Blocked("attention", (1, 128, ATTENTION_KEYS), args, clip_axes=(0,) if causal else None,
                   chained=True)


@functools.cache
def _rows_op(dtype: str, write_rows: bool) -> Blocked:
    """Row-wise reduce (and rescale, with `write_rows`) of x[rows, cols], 128 rows per tile."""
    return Blocked("rows", (128, STREAM_FREE), lambda dims: (TensorSpec(dims, dtype), write_rows),
                   chained=True)


@functools.cache
def _stream_op(engine_op: str, inputs: int, partitions: int, free: int, dtype: str) -> Blocked:
    """`inputs` operands of [tiles, partitions, free], one elementwise pass; dims = (tiles,)."""
    return Blocked("stream", (1,), lambda dims: (engine_op, *[TensorSpec((dims[0], partitions, free), dtype)]
                                                 * inputs))


@functools.cache
def _copy_op(partitions: int, free: int, dtype: str) -> Blocked:
    return Blocked("copy", (1,), lambda dims: (TensorSpec((dims[0], partitions, free), dtype),))


def _stream_layout(elements: int) -> tuple[int, int, int]:
    """`elements` as [tiles, P, F] streaming tiles (a small tensor is one partial tile)."""
    partitions = 128
    if elements >= partitions * STREAM_FREE:
        return math.ceil(elements / (partitions * STREAM_FREE)), partitions, STREAM_FREE
    rows = min(partitions, elements)
    return 1, rows, math.ceil(elements / rows)


def _time(op: Blocked, dims: tuple[int, ...], target: str, tier: str, lnc: int) -> Timed:
    timer = blocked.exact if tier == "exact" else blocked.fast
    return timer(op, dims, target, lnc)


def _result(name: str, parts: list[tuple[Timed, float]], flops: float, bytes_moved: float,
            dtype: str, target: str, tier: str) -> OpCost:
    """An `OpCost` from (timed launch, times it runs) parts; never below the roofline of the
    physical cores they ran on (two for a logical core of LNC=2)."""
    seconds = sum(timed.seconds * count for timed, count in parts)
    cores = max(timed.cores for timed, _count in parts)
    busy: dict[str, float] = {}
    for timed, count in parts:
        for engine, value in timed.busy.items():
            busy[engine] = busy.get(engine, 0.0) + value * count
    floor = roofline_seconds(core_spec(target), flops, bytes_moved, dtype) / cores
    return OpCost(op=name, seconds=max(seconds, floor), flops=flops, bytes=bytes_moved,
                  bound=max(busy, key=busy.get), lower_bound_seconds=floor, tier=tier, target=target)


def matmul(m: int, k: int, n: int, dtype: str = "bfloat16", target: str = "trn2", tier: str = "fast",
           lnc: int = 1) -> OpCost:
    """C[m, n] = A[m, k] @ B[k, n] by the built-in tiled matmul kernel."""
    _checked("matmul", target, dtype, tier, lnc, m=m, k=k, n=n)
    timed = _time(_matmul_op(dtype, _matmul_tiles(target)), (m, k, n), target, tier, lnc)
    traffic = (m * k + k * n + m * n) * DTYPE_BYTES[dtype]
    return _result("matmul", [(timed, 1)], 2.0 * m * k * n, traffic, dtype, target, tier)


def _elementwise_parts(elements: int, inputs: int, engine_op: str, dtype: str, target: str, tier: str,
                       lnc: int) -> Timed:
    tiles, partitions, free = _stream_layout(elements)
    return _time(_stream_op(engine_op, inputs, partitions, free, dtype), (tiles,), target, tier, lnc)


def elementwise(elements: int, inputs: int = 1, dtype: str = "bfloat16", target: str = "trn2",
                tier: str = "fast", engine: str = "vector", lnc: int = 1) -> OpCost:
    """One pass over `inputs` tensors of `elements` each, writing one: VectorE ops, or ScalarE
    activations (`engine="scalar"`)."""
    _checked("elementwise", target, dtype, tier, lnc, elements=elements, inputs=inputs)
    if engine not in ENGINE_OPS:
        raise ConfigError(f"cost.elementwise: engine {engine!r} is unknown", hint="'vector' or 'scalar'")
    timed = _elementwise_parts(elements, inputs, ENGINE_OPS[engine], dtype, target, tier, lnc)
    return _result("elementwise", [(timed, 1)], 0.0, (inputs + 1) * elements * DTYPE_BYTES[dtype],
                   dtype, target, tier)


def _rowwise(name: str, rows: int, cols: int, write_rows: bool, dtype: str, target: str, tier: str,
             lnc: int) -> OpCost:
    _checked(name, target, dtype, tier, lnc, rows=rows, cols=cols)
    timed = _time(_rows_op(dtype, write_rows), (rows, cols), target, tier, lnc)
    written = rows * cols if write_rows else rows
    return _result(name, [(timed, 1)], 0.0, (rows * cols + written) * DTYPE_BYTES[dtype], dtype, target, tier)


def norm(rows: int, cols: int, dtype: str = "bfloat16", target: str = "trn2", tier: str = "fast",
         lnc: int = 1) -> OpCost:
    """Layer or RMS norm of x[rows, cols]: reduce each row, then rescale and write it."""
    return _rowwise("norm", rows, cols, True, dtype, target, tier, lnc)


def softmax(rows: int, cols: int, dtype: str = "bfloat16", target: str = "trn2", tier: str = "fast",
            lnc: int = 1) -> OpCost:
    """Softmax along the rows of x[rows, cols]: one reduce pass and one rescale pass."""
    return _rowwise("softmax", rows, cols, True, dtype, target, tier, lnc)


def reduction(rows: int, cols: int, dtype: str = "bfloat16", target: str = "trn2", tier: str = "fast",
              lnc: int = 1) -> OpCost:
    """Reduce each row of x[rows, cols] to one value (sum, max, mean, losses)."""
    return _rowwise("reduction", rows, cols, False, dtype, target, tier, lnc)


def copy(elements: int, dtype: str = "bfloat16", target: str = "trn2", tier: str = "fast",
         lnc: int = 1) -> OpCost:
    """An HBM-to-HBM copy of `elements` by DMA (layout changes, concatenation, gathers)."""
    _checked("copy", target, dtype, tier, lnc, elements=elements)
    tiles, partitions, free = _stream_layout(elements)
    timed = _time(_copy_op(partitions, free, dtype), (tiles,), target, tier, lnc)
    return _result("copy", [(timed, 1)], 0.0, 2 * elements * DTYPE_BYTES[dtype], dtype, target, tier)


def embedding(tokens: int, dim: int, dtype: str = "bfloat16", target: str = "trn2", tier: str = "fast",
              lnc: int = 1) -> OpCost:
    """Gather `tokens` rows of `dim` from a table: a DMA copy of the rows gathered."""
    _checked("embedding", target, dtype, tier, lnc, tokens=tokens, dim=dim)
    found = copy(tokens * dim, dtype, target, tier, lnc)
    return _result_renamed(found, "embedding")


def _result_renamed(found: OpCost, name: str) -> OpCost:
    return OpCost(op=name, seconds=found.seconds, flops=found.flops, bytes=found.bytes, bound=found.bound,
                  lower_bound_seconds=found.lower_bound_seconds, tier=found.tier, target=found.target)


def optimizer_step(params: int, dtype: str = "float32", target: str = "trn2", tier: str = "fast",
                   lnc: int = 1) -> OpCost:
    """AdamW over `params` elements: the two moment updates (moment, grad -> moment) and the
    parameter update (param, m, v -> param), each one VectorE pass."""
    _checked("optimizer_step", target, dtype, tier, lnc, params=params)
    moments = _elementwise_parts(params, 2, "tensor", dtype, target, tier, lnc)
    update = _elementwise_parts(params, 3, "tensor", dtype, target, tier, lnc)
    return _result("optimizer_step", [(moments, 2), (update, 1)], 0.0, 7 * params * DTYPE_BYTES[dtype],
                   dtype, target, tier)


def attention(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int, kv_heads: int | None = None,
              causal: bool = True, dtype: str = "bfloat16", target: str = "trn2", tier: str = "fast",
              lnc: int = 1) -> OpCost:
    """Attention forward, softmax(Q K^T) V, as one launch of the fused flash-attention kernel
    (cost/kernels.py: attention) over batch x heads query groups. Queries are the last `q_len`
    of `kv_len` positions; a causal mask skips the key blocks after them. A head dim over the
    partitions is costed as its unfused parts."""
    kv_heads = heads if kv_heads is None else kv_heads
    _checked("attention", target, dtype, tier, lnc, batch=batch, heads=heads, q_len=q_len, kv_len=kv_len,
             head_dim=head_dim, kv_heads=kv_heads)
    if heads % kv_heads:
        raise ShapeError(f"cost.attention: heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if causal is not True and causal is not False:
        raise ConfigError(f"cost.attention: causal={causal!r}; it must be True or False")
    if causal and q_len > kv_len:
        raise ShapeError(f"cost.attention: causal with q_len {q_len} above kv_len {kv_len}; causal queries "
                         f"are the last q_len of the kv_len positions")
    kept = 1.0 - (q_len - 1) / (2.0 * kv_len) if causal else 1.0  # fraction of (query, key) pairs
    flops = 4.0 * batch * heads * q_len * kv_len * head_dim * kept
    traffic = batch * (2 * heads * q_len * head_dim + 2 * kv_heads * kv_len * head_dim) * DTYPE_BYTES[dtype]
    if head_dim <= core_spec(target).partitions:
        parts = [(_time(_attention_op(dtype, head_dim, causal), (batch * heads, q_len, kv_len), target, tier,
                        lnc), 1)]
    else:
        parts = _unfused_attention(batch * heads, q_len, kv_len, head_dim, kept, dtype, target, tier, lnc)
    return _result("attention", parts, flops, traffic, dtype, target, tier)


def _unfused_attention(groups, q_len, kv_len, head_dim, kept, dtype, target, tier, lnc):
    """A head dim over the partitions the fused kernel contracts over: per group, the scores
    matmul, the row softmax and the values matmul, the kept fraction of each."""
    tiles = _matmul_tiles(target)
    scores = _time(_matmul_op(dtype, tiles), (q_len, head_dim, kv_len), target, tier, lnc)
    rows = _time(_rows_op(dtype, True), (q_len, kv_len), target, tier, lnc)
    values = _time(_matmul_op(dtype, tiles), (q_len, kv_len, head_dim), target, tier, lnc)
    return [(part, groups * kept) for part in (scores, rows, values)]


FAMILIES = {"matmul": matmul, "attention": attention, "elementwise": elementwise, "norm": norm,
            "softmax": softmax, "reduction": reduction, "copy": copy, "embedding": embedding,
            "optimizer_step": optimizer_step}


def op(name: str, *args, **kwargs) -> OpCost:
    """The cost of op family `name` (a key of FAMILIES) with that family's arguments."""
    family = FAMILIES.get(name) if isinstance(name, str) else None
    if family is None:
        raise UnsupportedError(f"cost.op: no op family {name!r}", what=str(name),
                               hint=f"one of {', '.join(FAMILIES)}")
    try:
        inspect.signature(family).bind(*args, **kwargs)
    except TypeError as error:
        raise ConfigError(f"cost.op({name!r}, ...): {error}",
                          hint=f"cost.{name}{inspect.signature(family)}") from None
    return family(*args, **kwargs)
