"""CHECK rules of GpSimd's index patterns, partition reduction and gather (nki.isa.<name> docs)."""

from __future__ import annotations

from math import prod

from trnsim.core.check import CHECK, _fail, _free
from trnsim.core.check_vector import same_layout
from trnsim.core.isa import Opcode
from trnsim.core.trace import Instruction
from trnsim.errors import DTypeError, ShapeError


@CHECK.register(Opcode.IOTA, Opcode.AFFINE_SELECT)
def _affine_pattern(ins: Instruction, core) -> None:
    """The pattern [[step, count], ...] enumerates every element of a dst partition, once."""
    pattern, dst = ins.param("pattern"), ins.outputs[0]
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
    if dst.elements != _free(data):
        _fail(ShapeError, ins, f"dst {dst.name!r} is [{dst.partition_count}, {_free(dst)}]; reducing "
              f"{data.name!r} across its partitions gives [1, {_free(data)}]")


def is_integer(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


@CHECK.register(Opcode.N_GATHER)
def _n_gather(ins: Instruction, core) -> None:
    """dst[p, j] = data[p, indices[p, j]]: integer indices laid out like dst, on data's partitions."""
    data, indices = ins.inputs
    dst = ins.outputs[0]
    same_layout(ins, indices, dst)
    if data.partition_count != dst.partition_count:
        _fail(ShapeError, ins, f"data {data.name!r} spans {data.partition_count} partitions but dst "
              f"{dst.name!r} spans {dst.partition_count}; nc_n_gather gathers within each partition")
    if not is_integer(indices.dtype):
        _fail(DTypeError, ins, f"indices {indices.name!r} is {indices.dtype}; nc_n_gather takes integer "
              f"indices")
