"""CHECK rules of GpSimd: index patterns, partition reduction, gathers, segment bounds, PRNG state
(nki.isa.<name> docs)."""

from __future__ import annotations

from math import prod

from trnsim.core.check import CHECK, _describe, _fail, _free
from trnsim.core.check_vector import refuse_magnitude_reduction, same_layout
from trnsim.core.isa import Opcode
from trnsim.core.trace import Instruction, Region
from trnsim.errors import DTypeError, KernelError, ShapeError

AFFINE_PATTERN_DIMS = 4
"""iota / affine_select: "a tensor access pattern of up to 4D" (nki.isa.iota)."""


@CHECK.register(Opcode.IOTA, Opcode.AFFINE_SELECT)
def _affine_pattern(ins: Instruction, core) -> None:
    """The pattern [[step, count], ...] (up to 4-D) enumerates every element of a dst partition, once."""
    pattern, dst = ins.param("pattern"), ins.outputs[0]
    if len(pattern) > AFFINE_PATTERN_DIMS:
        _fail(ShapeError, ins, f"pattern {[list(pair) for pair in pattern]} has {len(pattern)} dims; iota "
              f"and affine_select take up to {AFFINE_PATTERN_DIMS}", hint="merge dims with equal strides")
    counts = [count for _, count in pattern]
    if prod(counts) != _free(dst):
        _fail(ShapeError, ins, f"pattern {[list(pair) for pair in pattern]} gives {prod(counts)} values per "
              f"partition but dst {dst.name!r} has {_free(dst)} elements per partition",
              hint="the product of the pattern's counts must equal dst's free size")


@CHECK.register(Opcode.TENSOR_PARTITION_REDUCE)
def _partition_reduce(ins: Instruction, core) -> None:
    """Reducing across partitions leaves data's free elements, [1, F] (nl.sum(axis=0) writes them to
    a 1-D tile of F partitions, in the same order)."""
    data, dst = ins.inputs[0], ins.outputs[0]
    refuse_magnitude_reduction(ins)
    if dst.elements != _free(data):
        _fail(ShapeError, ins, f"dst {dst.name!r} is [{dst.partition_count}, {_free(dst)}]; reducing "
              f"{data.name!r} across its partitions gives [1, {_free(data)}]")


@CHECK.register(Opcode.N_GATHER)
def _n_gather(ins: Instruction, core) -> None:
    """dst[p, j] = data[p, indices[p, j]]: integer indices laid out like dst, on data's partitions."""
    data, indices = ins.inputs
    dst = ins.outputs[0]
    same_layout(ins, indices, dst)
    if data.partition_count != dst.partition_count:
        _fail(ShapeError, ins, f"data {data.name!r} spans {data.partition_count} partitions but dst "
              f"{dst.name!r} spans {dst.partition_count}; nc_n_gather gathers within each partition")
    if indices.dtype != "uint32":
        _fail(DTypeError, ins, f"indices {indices.name!r} is {indices.dtype}; nc_n_gather takes uint32 "
              f"indices")
    if dst.dtype != data.dtype:
        _fail(DTypeError, ins, f"dst is {dst.dtype} but data is {data.dtype}; nc_n_gather does not cast")


def _gpsimd_groups(ins: Instruction, core, region: Region) -> int:
    """Number of GpSimd partition groups a region covers; it must cover whole groups."""
    group = core.gpsimd_group_partitions
    if region.partition_count % group or region.partition_start % group:
        _fail(ShapeError, ins, f"{region.name!r} covers partitions {region.partition_start}.."
              f"{region.partition_start + region.partition_count - 1}; this GpSimd instruction works on "
              f"whole groups of {group} partitions (one per GpSimd core)")
    return region.partition_count // group


@CHECK.register(Opcode.LOCAL_GATHER)
def _local_gather(ins: Instruction, core) -> None:
    dst, (src, index) = ins.outputs[0], ins.inputs
    if src.partition_count != index.partition_count or dst.partition_count != src.partition_count:
        _fail(ShapeError, ins, f"src_buffer, index and dst span {src.partition_count}, "
              f"{index.partition_count} and {dst.partition_count} partitions; they must match")
    if index.dtype != "uint16":
        _fail(DTypeError, ins, f"index {index.name!r} is {index.dtype}; local_gather takes uint16 indices")
    if dst.dtype != src.dtype:
        _fail(DTypeError, ins, f"dst is {dst.dtype} but src_buffer is {src.dtype}; local_gather "
              f"does not cast")
    per_group = index.elements // _gpsimd_groups(ins, core, src)
    elements, valid = ins.param("num_elem_per_idx"), ins.param("num_valid_indices")
    allowed = [1 << k for k in range(core.local_gather_max_elements_per_index.bit_length())]
    if elements not in allowed:
        _fail(ShapeError, ins, f"num_elem_per_idx={elements}; it must be one of {allowed}")
    if not 0 < valid <= min(per_group, core.local_gather_max_indices):
        _fail(ShapeError, ins, f"num_valid_indices={valid}; each partition group holds {per_group} indices "
              f"and a GpSimd core gathers at most {core.local_gather_max_indices}")
    if _free(dst) != valid * elements:
        _fail(ShapeError, ins, f"dst {dst.name!r} has {_free(dst)} elements per partition; the gather "
              f"writes num_valid_indices x num_elem_per_idx = {valid * elements}")


def _int32_or_fp32(ins: Instruction, *regions: Region) -> None:
    for region in regions:
        if region.dtype not in ("int32", "float32"):
            _fail(DTypeError, ins, f"{region.name!r} is {region.dtype}; this instruction takes int32 "
                  f"or float32")


@CHECK.register(Opcode.SEQUENCE_BOUNDS)
def _sequence_bounds(ins: Instruction, core) -> None:
    dst, ids = ins.outputs[0], ins.inputs[0]
    _int32_or_fp32(ins, dst, ids)
    if ids.partition_count != 1 or dst.partition_count != 1 or _free(dst) != 2 * _free(ids):
        _fail(ShapeError, ins, f"segment_ids [{ids.partition_count}, {_free(ids)}] needs dst [1, 2, "
              f"{_free(ids)}] and a partition dimension of 1; dst is [{dst.partition_count}, {_free(dst)}]")


@CHECK.register(Opcode.NONZERO_WITH_COUNT)
def _nonzero_with_count(ins: Instruction, core) -> None:
    dst, src = ins.outputs[0], ins.inputs[0]
    _int32_or_fp32(ins, src)
    if dst.dtype != "int32":
        _fail(DTypeError, ins, f"dst {dst.name!r} is {dst.dtype}; nonzero_with_count writes int32")
    if dst.partition_count != src.partition_count or _free(dst) != _free(src) + 1:
        _fail(ShapeError, ins, f"dst is [{dst.partition_count}, {_free(dst)}] for src "
              f"[{src.partition_count}, {_free(src)}]; dst needs the same partitions and one more "
              f"element (the count)")
    if src.partition_start % core.gpsimd_group_partitions:
        _fail(ShapeError, ins, f"src starts at partition {src.partition_start}; nonzero_with_count works on "
              f"the first partition of each {core.gpsimd_group_partitions}-partition GpSimd group",
              hint="start the tile on a group boundary")


@CHECK.register(Opcode.RAND_SET_STATE, Opcode.RAND_GET_STATE)
def _rand_state(ins: Instruction, core) -> None:
    region = (ins.inputs or ins.outputs)[0]
    words = core.engines[ins.engine.value].rng_state_words
    if words is None:
        _fail(KernelError, ins, f"the {ins.engine.value} engine of {_describe(core)} has no PRNG state "
              f"this instruction can read or write", hint="use the gpsimd engine")
    if region.dtype != "uint32":
        _fail(DTypeError, ins, f"{region.name!r} is {region.dtype}; PRNG state words are uint32")
    if _free(region) != words:
        _fail(ShapeError, ins, f"{region.name!r} is {region.dtype} with {_free(region)} elements per "
              f"partition; the {ins.engine.value} PRNG state is {words} words per lane")
