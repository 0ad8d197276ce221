"""CHECK rules of the Vector and Scalar engines: the shape relations between operands.

The generic checks of core/check.py have already compared data and dst partitions (and, for
element-wise instructions, their free sizes) and each [P, 1] scalar operand. These rules add
what each instruction needs beyond that, so that everything they let through executes and gives
the result the NKI ISA documents (awsdocs-neuron, nki.isa.<name>).
"""

from __future__ import annotations

from math import prod

import numpy as np

from trnsim.core import alu
from trnsim.core.check import CHECK, _fail, _free, shape_of
from trnsim.core.isa import Engine, Memory, Opcode
from trnsim.core.trace import InputRef, Instruction, Region
from trnsim.errors import ArgumentError, DTypeError, KernelError, ShapeError, UnsupportedError

BN_STATS_VALUES = 6
"""bn_stats writes count, mean and variance*count of the even and of the odd elements (nki.isa.bn_stats)."""
BN_AGGR_VALUES = 2
"""bn_aggr writes a mean and a variance per partition from (count, mean, M2) triples (nki.isa.bn_aggr)."""
FP32_MIN = np.finfo(np.float32).min
"""range_select's on_false_value: "this must be FP32_MIN" (nki.isa.range_select)."""
TOP_VALUES = 8
"""max8, nc_find_index8 and nc_match_replace8 work on 8 values per partition (nki.isa.max8)."""
TOP_MAX_ELEMENTS = 16384
"""max8 and nc_find_index8 read "between 8 and 16,384" elements per partition (nki.isa.max8,
nki.isa.nc_find_index8; nc_match_replace8's doc states no limit)."""


def _dims(region: Region) -> str:
    return f"[{region.partition_count}, {_free(region)}]"


def same_layout(ins: Instruction, region: Region, like: Region) -> None:
    """`region` combines element by element with `like`: same partitions, same free size."""
    if region.partition_count == like.partition_count and region.pattern == like.pattern:
        return  # the common case, decided without counting (this runs for most instructions)
    if region.partition_count != like.partition_count or _free(region) != _free(like):
        _fail(ShapeError, ins, f"{region.name!r} is {_dims(region)} (partitions x elements per partition) "
              f"but {like.name!r} is {_dims(like)}; they combine element by element",
              hint="give both operands the same partitions and free size")


def per_partition(ins: Instruction, region: Region, role: str, values: int = 1) -> None:
    """An operand with `values` elements in each partition of the data (reduce_res is [P, 1])."""
    partitions = ins.inputs[0].partition_count
    if region.partition_count != partitions or _free(region) != values:
        _fail(ShapeError, ins, f"{role} {region.name!r} is {_dims(region)}; it must be "
              f"[{partitions}, {values}] ({values} per partition of the data)")


def is_integer(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _reduce_res(ins: Instruction) -> None:
    """reduce_res, when given, holds one value per partition."""
    if len(ins.outputs) > 1:
        per_partition(ins, ins.outputs[1], "reduce_res")


@CHECK.register(Opcode.ACTIVATION)
def _activation(ins: Instruction, core) -> None:
    """activation reduces with add only ("reduce_op must be nl.add", nki.isa.activation, on every
    generation: unlike activation_reduce, whose docs limit it on NeuronCore-v2 only; activate2 takes
    others); activate2 (trn3) needs both operators and both immediates; reduce_res is [P, 1]."""
    params = ins.params
    if params.get("op0") is None and params.get("op1") is None:
        if params.get("reduce_op") != "add":
            _fail(ArgumentError, ins, f"reduce_op={params.get('reduce_op')}; activation's reduce_op must be "
                  f"nl.add", hint="use activate2 (trn3) or tensor_reduce for other reductions")
        _reduce_res(ins)
        return
    ops = [params.get(key) for key in ("op0", "op1", "imm0", "imm1")]
    if None in ops:
        given = ", ".join(f"{key}={value!r}" for key, value in zip(("op0", "op1", "imm0", "imm1"), ops,
                                                                   strict=True))
        _fail(ArgumentError, ins, f"activate2 needs op0, op1, imm0 and imm1; got {given}")
    _reduce_res(ins)


@CHECK.register(Opcode.ACTIVATION_REDUCE, Opcode.EXPONENTIAL)
def _reduce_res_only(ins: Instruction, core) -> None:
    """Element-wise data and dst are the generic checks' business; reduce_res is [P, 1]. On
    NeuronCore-v2 activation_reduce's reduce_op must be nl.add (nki.isa.activation_reduce)."""
    if ins.opcode is Opcode.ACTIVATION_REDUCE and core.generation < 3 and ins.param("reduce_op") != "add":
        _fail(UnsupportedError, ins, f"reduce_op={ins.param('reduce_op')}; on NeuronCore-v2 ({core.name}) "
              f"activation_reduce reduces with add only", hint="choose trn2 or later, or reduce with add")
    reduce_init_with_load(ins)
    _reduce_res(ins)


def reduce_init_with_load(ins: Instruction) -> None:
    """reduce_init "should only be set when reduce_cmd is load_reduce", and "must be provided" then
    (nki.isa.tensor_scalar_reduce; exponential's default 0.0 counts as unset)."""
    loads = ins.param("reduce_cmd") == "load_reduce"
    if ins.param("reduce_init") is not None and not loads:
        _fail(ArgumentError, ins, f"reduce_init is set but reduce_cmd={ins.param('reduce_cmd')}; the "
              f"accumulator loads reduce_init only with reduce_cmd=load_reduce", hint="drop reduce_init")
    if loads and ins.param("reduce_init") is None:
        _fail(ArgumentError, ins, "reduce_cmd=load_reduce loads reduce_init into the accumulator, and "
              "reduce_init is not given", hint="pass reduce_init (a number or a [P, 1] fp32 tile)")


@CHECK.register(Opcode.RANGE_SELECT)
def _range_select(ins: Instruction, core) -> None:
    """on_true_tile is a float tile, bound0/bound1 fp32 and on_false_value FP32_MIN ("due to hardware
    constraints", nki.isa.range_select); reduce_res is [P, 1]."""
    data = ins.inputs[0]
    if is_integer(data.dtype):
        _fail(DTypeError, ins, f"on_true_tile is {data.dtype}; range_select takes a float tile")
    if np.float32(ins.param("on_false_value")) != FP32_MIN:
        _fail(ArgumentError, ins, f"on_false_value={ins.param('on_false_value')}; range_select's must be "
              f"FP32_MIN ({FP32_MIN:.8g}), a hardware constraint", hint="leave on_false_value at its default")
    for key in ("bound0", "bound1"):
        bound = ins.param(key)
        if type(bound) is InputRef and ins.inputs[bound.index].dtype != "float32":
            _fail(DTypeError, ins, f"{key} is {ins.inputs[bound.index].dtype}; range_select bounds are fp32")
    _reduce_res(ins)

@CHECK.register(Opcode.TENSOR_SCALAR)
def _tensor_scalar(ins: Instruction, core) -> None:
    """Each operator has its operand (a unary op0 has none); a second operator needs operand1 and is
    of op0's type ("both bitvec or both arithmetic", nki.isa.tensor_scalar)."""
    _op0_operand(ins, core)
    op0, op1 = ins.param("op0"), ins.param("op1")
    if op1 is not None and ins.param("operand1") is None:
        _fail(ArgumentError, ins, f"op1={op1!r} without operand1", hint="pass operand1=")
    bitwise = [op for op in (op0, op1) if op in alu.BITWISE]
    if bitwise:
        _integers(ins, bitwise[0], ins.inputs[0], ins.outputs[0])
    if op1 is not None and (op0 in alu.BITWISE) != (op1 in alu.BITWISE):
        _fail(ArgumentError, ins, f"op0={op0}, op1={op1}; tensor_scalar's two operators must be both "
              f"bitvec or both arithmetic", hint="split it into two tensor_scalar calls")


def _op0_operand(ins: Instruction, core) -> None:
    """A binary op0 needs operand0; a unary one (nl.abs, ...) takes None or 0 there, and square and
    relu need trn3 (core/alu.py, UNARY)."""
    op0, operand0 = ins.param("op0"), ins.param("operand0")
    if op0 not in alu.UNARY:
        if operand0 is None:
            _fail(ArgumentError, ins, f"operand0=None; op0={op0} needs an operand", hint="pass operand0=")
        return
    if type(operand0) is InputRef or operand0 not in (None, 0):
        _fail(ArgumentError, ins, f"op0={op0} is unary; operand0 must be None or 0",
              hint="drop operand0, or use a binary operator")
    first_generation = alu.UNARY[op0][1]
    if core.generation < first_generation:
        _fail(UnsupportedError, ins, f"op0={op0} needs NeuronCore generation {first_generation} or later; "
              f"{core.name} is generation {core.generation}", hint="choose a newer target")


@CHECK.register(Opcode.SCALAR_TENSOR_TENSOR)
def _scalar_tensor_tensor(ins: Instruction, core) -> None:
    """operand1 is a whole tile combined element by element with (data op0 operand0); both
    operators are arithmetic ("Bitvec operators are not supported", nki.isa.scalar_tensor_tensor)."""
    arithmetic(ins, "op0", "op1")
    operand1 = ins.param("operand1")
    if type(operand1) is InputRef:
        same_layout(ins, ins.inputs[operand1.index], ins.outputs[0])


@CHECK.register(Opcode.TENSOR_TENSOR)
def _tensor_tensor(ins: Instruction, core) -> None:
    """Both inputs match dst; at most one of them is read from PSUM."""
    same_layout(ins, ins.inputs[1], ins.outputs[0])
    if ins.param("op") in alu.BITWISE:
        _integers(ins, ins.param("op"), *ins.inputs[:2], ins.outputs[0])
    if all(region.memory is Memory.PSUM for region in ins.inputs[:2]):
        _fail(KernelError, ins, "both inputs are in PSUM; tensor_tensor reads at most one input from PSUM",
              hint="copy one operand to SBUF first")


@CHECK.register(Opcode.TENSOR_REDUCE)
def _tensor_reduce(ins: Instruction, core) -> None:
    """The reduced axes are the last free dims (never the partition dim); dst holds the partitions
    times the kept free dims; negate only with an arithmetic op (nki.isa.tensor_reduce)."""
    data, dst = ins.inputs[0], ins.outputs[0]
    shape = shape_of(data)
    rank, axes = len(shape), tuple(ins.param("axis"))
    if not axes or axes != tuple(range(axes[0], rank)) or axes[0] < 1:
        shown = axes[0] if len(axes) == 1 else list(axes)
        _fail(ShapeError, ins, f"axis={shown} on a {rank}-D tile {list(shape)}: the reduced axes must be "
              f"consecutive free dims (1..{rank - 1}) ending at dim {rank - 1}",
              hint=f"e.g. axis={rank - 1} reduces the innermost dim; tensor_partition_reduce reduces "
                   "across partitions")
    kept = prod(shape[1:axes[0]])
    if ins.param("op") in alu.BITWISE:
        _integers(ins, ins.param("op"), data, dst)
        if ins.param("negate"):
            _fail(ArgumentError, ins, f"negate=True with op={ins.param('op')}; negate is \"only applicable "
                  f"when op is an arithmetic operator\"", hint="drop negate")
    refuse_magnitude_reduction(ins)
    if _free(dst) != kept:
        _fail(ShapeError, ins, f"dst {list(shape_of(dst))} does not hold the result of reducing axes "
              f"{axes} of {list(shape)}: {data.partition_count} partitions x {kept} values")


def refuse_magnitude_reduction(ins: Instruction) -> None:
    """abs_max / abs_min are not legal as an ALU reduction (the ISA's operator table)."""
    if ins.param("op") in alu.MAGNITUDE_OPS:
        _fail(ArgumentError, ins, f"op={ins.param('op')} is not legal as a reduction (the ISA's operator "
              f"table)", hint="reduce with maximum/minimum of nl.abs, or activation's reduce_op")


def arithmetic(ins: Instruction, *keys: str) -> None:
    """Operators the doc restricts to arithmetic ones: no bitvec operator."""
    for key in keys:
        if ins.param(key) in alu.BITWISE:
            _fail(ArgumentError, ins, f"{key}={ins.param(key)}; this instruction takes an arithmetic"
                  f" operator, not a bitvec one", hint="bitvec operators: tensor_scalar / tensor_tensor")


def _integers(ins: Instruction, op: str, *regions: Region) -> None:
    """Bitvec operators treat elements as bit patterns: integer tiles only ("bitvec ops are for
    integers", the ISA's operator table; nki.isa.tensor_reduce)."""
    for region in regions:
        if not is_integer(region.dtype):
            _fail(DTypeError, ins, f"{region.name!r} is {region.dtype}; {op} works on the "
                  f"bits of integer tiles")


@CHECK.register(Opcode.TENSOR_SCALAR_REDUCE)
def _tensor_scalar_reduce(ins: Instruction, core) -> None:
    """dst holds (data op0 operand0) element by element, op0 arithmetic; reduce_res is [P, 1]."""
    if ins.param("op0") in alu.BITWISE:
        _fail(ArgumentError, ins, f"op0={ins.param('op0')}; tensor_scalar_reduce takes an arithmetic "
              f"operator, not a bitvec one", hint="use tensor_scalar, then tensor_reduce")
    _op0_operand(ins, core)
    same_layout(ins, ins.inputs[0], ins.outputs[0])
    reduce_init_with_load(ins)
    _reduce_res(ins)


@CHECK.register(Opcode.TENSOR_TENSOR_SCAN)
def _tensor_tensor_scan(ins: Instruction, core) -> None:
    """data0, data1 and dst step together along the free dims. tensor_scalar_cumulative (pre_op set)
    takes an arithmetic op0 and no int32/uint32 tiles (nki.isa.tensor_scalar_cumulative)."""
    for region in ins.inputs[:2]:
        same_layout(ins, region, ins.outputs[0])
    if ins.param("pre_op") is None:
        return
    if ins.param("pre_op") in alu.BITWISE:
        _fail(ArgumentError, ins, f"op0={ins.param('pre_op')}; tensor_scalar_cumulative takes an arithmetic "
              f"op0, not a bitvec one")
    for region in (ins.inputs[0], ins.outputs[0]):
        if region.dtype in ("int32", "uint32"):
            _fail(DTypeError, ins, f"{region.name!r} is {region.dtype}; tensor_scalar_cumulative does not "
                  f"take int32/uint32 tiles (an ISA limitation)", hint="use fp32, or 8/16-bit integers")


@CHECK.register(Opcode.RECIPROCAL)
def _elementwise(ins: Instruction, core) -> None:
    """One input, one output element per input element, scalars [P, 1]: the generic checks say it all."""


@CHECK.register(Opcode.DROPOUT)
def _dropout(ins: Instruction, core) -> None:
    """dst.dtype matches data.dtype; integer data takes an fp32 prob tile (nki.isa.dropout)."""
    data, dst, prob = ins.inputs[0], ins.outputs[0], ins.param("prob")
    if dst.dtype != data.dtype:
        _fail(DTypeError, ins, f"data is {data.dtype} but dst is {dst.dtype}; dropout writes data's dtype")
    if type(prob) is InputRef and is_integer(data.dtype) and ins.inputs[prob.index].dtype != "float32":
        _fail(DTypeError, ins, f"prob is {ins.inputs[prob.index].dtype}; with {data.dtype} data the prob "
              f"tile must be float32")


@CHECK.register(Opcode.TRANSPOSE)
def _transpose(ins: Instruction, core) -> None:
    """dst is [F, P] for src [P, F], within the engine's transpose size."""
    src, dst = ins.inputs[0], ins.outputs[0]
    limit = core.matmul_max_stationary_free if ins.engine is Engine.TENSOR else core.partitions // 4
    if src.partition_count > limit or _free(src) > limit:
        _fail(ShapeError, ins, f"transpose of {_dims(src)} on the {ins.engine.value} engine; the limit is "
              f"{limit}x{limit}")
    if dst.partition_count != _free(src) or _free(dst) != src.partition_count:
        _fail(ShapeError, ins, f"dst {dst.name!r} is {_dims(dst)}; the transpose of {src.name!r} "
              f"{_dims(src)} is [{_free(src)}, {src.partition_count}]")


@CHECK.register(Opcode.BN_STATS)
def _bn_stats(ins: Instruction, core) -> None:
    """At most bn_stats_max_free elements per partition in; 6 statistics per partition out."""
    free = _free(ins.inputs[0])
    if free > core.bn_stats_max_free:
        _fail(ShapeError, ins, f"bn_stats free size is {free}; the limit on {core.name} is "
              f"{core.bn_stats_max_free}", hint="split into chunks and combine them with bn_aggr")
    per_partition(ins, ins.outputs[0], "dst", BN_STATS_VALUES)


@CHECK.register(Opcode.BN_AGGR)
def _bn_aggr(ins: Instruction, core) -> None:
    """data holds (count, mean, M2) triples from bn_stats; dst gets a mean and a variance."""
    free = _free(ins.inputs[0])
    if free == 0 or free % 3:
        _fail(ShapeError, ins, f"data {ins.inputs[0].name!r} has {free} elements per partition; bn_aggr "
              f"reads (count, mean, M2) triples, so a multiple of 3", hint="pass the bn_stats outputs")
    per_partition(ins, ins.outputs[0], "dst", BN_AGGR_VALUES)


@CHECK.register(Opcode.SELECT_REDUCE)
def _select_reduce(ins: Instruction, core) -> None:
    """predicate, on_true and dst match element by element; reduce_res is [P, 1]. predicate is an
    integer tile; on_true is not tfloat32, int32 or uint32 (nki.isa.select_reduce)."""
    same_layout(ins, ins.inputs[1], ins.outputs[0])
    predicate, on_true = ins.inputs[0], ins.inputs[1]
    if not (is_integer(predicate.dtype) or predicate.dtype in ("bool", "bool_")):
        _fail(DTypeError, ins, f"predicate is {predicate.dtype}; select_reduce takes an integer predicate "
              f"(int8, uint8, int16, uint16)")
    if on_true.dtype in ("tfloat32", "int32", "uint32"):
        _fail(DTypeError, ins, f"on_true is {on_true.dtype}; select_reduce takes any dtype but tfloat32, "
              f"int32 and uint32")
    _reduce_res(ins)


@CHECK.register(Opcode.MAX8)
def _max8(ins: Instruction, core) -> None:
    """The 8 largest of at least 8 values per partition."""
    top_elements(ins, ins.inputs[0])
    per_partition(ins, ins.outputs[0], "dst", TOP_VALUES)


def top_elements(ins: Instruction, src: Region) -> None:
    if not TOP_VALUES <= _free(src) <= TOP_MAX_ELEMENTS:
        _fail(ShapeError, ins, f"{src.name!r} has {_free(src)} elements per partition; this instruction "
              f"reads {TOP_VALUES} to {TOP_MAX_ELEMENTS}", hint="split the search and combine the results")


_INDEX_DTYPES = ("uint16", "uint32")
"""What nc_find_index8 writes its indices as (nki.isa.nc_find_index8)."""


@CHECK.register(Opcode.FIND_INDEX8)
def _find_index8(ins: Instruction, core) -> None:
    """8 values per partition to look for, 8 uint16 or uint32 indices per partition out."""
    top_elements(ins, ins.inputs[0])
    per_partition(ins, ins.inputs[1], "vals", TOP_VALUES)
    per_partition(ins, ins.outputs[0], "dst", TOP_VALUES)
    if ins.outputs[0].dtype not in _INDEX_DTYPES:
        _fail(DTypeError, ins, f"dst is {ins.outputs[0].dtype}; nc_find_index8 writes {list(_INDEX_DTYPES)}")


@CHECK.register(Opcode.MATCH_REPLACE8)
def _match_replace8(ins: Instruction, core) -> None:
    """dst is data with up to 8 values per partition replaced; dst_idx holds their 8 indices."""
    same_layout(ins, ins.inputs[0], ins.outputs[0])
    per_partition(ins, ins.inputs[1], "vals", TOP_VALUES)
    if len(ins.outputs) > 1:
        per_partition(ins, ins.outputs[1], "dst_idx", TOP_VALUES)


_KEEP = 255
"""A shuffle_mask entry that leaves the dst partition unchanged (nki.isa.nc_stream_shuffle)."""


@CHECK.register(Opcode.STREAM_SHUFFLE)
def _stream_shuffle(ins: Instruction, core) -> None:
    """Within each 32-partition quadrant, dst partition i copies src partition mask[i] of the same
    quadrant (255 keeps dst): one mask entry per quadrant partition, naming a src partition that
    exists; src and dst have the same dtype and free size."""
    src, dst = ins.inputs[0], ins.outputs[0]
    quadrant, mask = core.partitions // 4, tuple(ins.param("shuffle_mask"))
    if len(mask) != quadrant or any(not 0 <= m < quadrant and m != _KEEP for m in mask):
        _fail(ShapeError, ins, f"shuffle_mask has {len(mask)} entries {list(mask)[:8]}...; it needs "
              f"{quadrant}, each a partition 0..{quadrant - 1} of the quadrant or {_KEEP} (keep dst)")
    if src.dtype != dst.dtype:
        _fail(DTypeError, ins, f"src is {src.dtype} but dst is {dst.dtype}; nc_stream_shuffle does not cast")
    if _free(src) != _free(dst):
        _fail(ShapeError, ins, f"src {src.name!r} is {_dims(src)} and dst {dst.name!r} is {_dims(dst)}; "
              f"they need the same number of elements per partition")
    for p in range(dst.partition_count):
        chosen = mask[p % quadrant]
        source = (p // quadrant) * quadrant + chosen
        if chosen != _KEEP and source >= src.partition_count:
            _fail(ShapeError, ins, f"dst partition {p} copies src partition {source} (shuffle_mask"
                  f"[{p % quadrant}]={chosen}), but src {src.name!r} has {src.partition_count} partitions")


@CHECK.register(Opcode.RNG)
def _rng(ins: Instruction, core) -> None:
    """rand2 (trn3) draws from [low, high): both bounds, low first. rng runs on GpSimd from
    NeuronCore-v3 (nki.isa.rng). A float dst is kept: nl.rand issues RNG into float tiles."""
    low, high = ins.param("low"), ins.param("high")
    if ins.engine is Engine.GPSIMD and core.generation < 3:
        _fail(UnsupportedError, ins, f"rng on the gpsimd engine needs NeuronCore-v3 or later; {core.name} is "
              f"generation {core.generation}", hint="use the vector engine")
    if (low is None) != (high is None) or (low is not None and not low <= high):
        _fail(ArgumentError, ins, f"random bounds min={low}, max={high}; rand2 needs min <= max")
