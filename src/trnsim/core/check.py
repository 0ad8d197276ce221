"""CHECK: what the chip would refuse, raised with the kernel's file and line.

`check(ins, core)` runs the generic, spec-driven checks (operand memories, partition counts and
start partitions, matching partitions, dtypes legal on the generation) and then the opcode's own
rule from the `CHECK` table (matmul tile limits, PSUM banks, bn_stats size, ...). All limits come
from the `CoreSpec` of the target (trnsim.hardware).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from operator import attrgetter

from trnsim.core import alu
from trnsim.core.execute_mx import GROUP_PARTITIONS, QUADRANT, scale_rows
from trnsim.core.isa import (
    DMA,
    ELEMENTWISE,
    SAME_PARTITIONS,
    SPECS,
    Engine,
    Kind,
    Memory,
    Opcode,
    Param,
    RegisterRef,
)
from trnsim.core.rules import RuleTable
from trnsim.core.trace import InputRef, Instruction, Region
from trnsim.errors import ArgumentError, DTypeError, KernelError, ShapeError, UnsupportedError

CHECK = RuleTable("CHECK")

FP8_KINDS = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2")


def _fail(kind: type, ins: Instruction, message: str, hint: str | None = None):
    raise kind(message, where=ins.where, op=f"nisa.{ins.opcode.value}", hint=hint)


def check(ins: Instruction, core) -> None:
    """Every check for one instruction on one core generation."""
    spec = SPECS[ins.opcode]
    for region in ins.inputs:
        if region.memory not in spec.reads:
            _wrong_memory(ins, "input", region, spec.reads)
    for region in ins.outputs:
        if region.memory not in spec.writes:
            _wrong_memory(ins, "output", region, spec.writes)
    if spec.engine_reads or spec.engine_writes:
        _engine_memories(ins, spec)
    regions = ins.inputs + ins.outputs
    partitions, dtypes = core.partitions, core.dtypes
    for region in regions:
        if region.partition_start or region.partition_count > partitions:  # else nothing to check
            _check_partitions(ins, region, core)
        if region.dtype not in dtypes:
            _fail(DTypeError, ins, f"dtype {region.dtype} of {region.name!r} is not available on "
                  f"{_describe(core)}", hint="cast to a dtype the target has")
    if ins.engine is Engine.GPSIMD and any(r.memory is Memory.PSUM for r in regions):
        _fail(KernelError, ins, "the GpSimd engine cannot access PSUM",
              hint="use SBUF tiles, or another engine")
    if ins.opcode in SAME_PARTITIONS and ins.inputs and ins.outputs:
        src, dst = ins.inputs[0], ins.outputs[0]
        if src.partition_count != dst.partition_count:
            _fail(ShapeError, ins, f"source {src.name!r} spans {src.partition_count} partitions but "
                  f"destination {dst.name!r} spans {dst.partition_count}",
                  hint="source and destination must use the same number of partitions")
    if ins.opcode in ELEMENTWISE and ins.inputs and ins.outputs:
        _check_same_free_size(ins)
    _check_params(ins, spec, core)
    check_packed(ins, core)
    rule = CHECK.get(ins.opcode)
    if rule is not None:
        rule(ins, core)


_LEGAL_PARAMS: set[tuple] = set()
"""(opcode, generation, name, type, value) of parameters already found legal: a kernel passes the
same few values again and again, and every rule below depends on these alone. Only plain scalars
are kept (`_KEPT_TYPES`; the type is in the key, so True never passes as 1): a tuple equal to
another may hold floats where that one held ints. Cleared when it holds `_LEGAL_PARAMS_KEPT`."""
_LEGAL_PARAMS_KEPT = 4096
_KEPT_TYPES = frozenset({str, int, float, bool})


def _check_params(ins: Instruction, spec, core) -> None:
    """Each parameter against its declaration in the contract (core/isa.py)."""
    declared = spec.params
    for key, value in ins.params.items():
        seen = None
        if value.__class__ in _KEPT_TYPES:
            seen = (ins.opcode, core.generation, key, value.__class__, value)
            if seen in _LEGAL_PARAMS:
                continue
        param = declared.get(key)
        if param is None:
            _fail(UnsupportedError, ins, f"parameter {key!r} is not in the contract of {spec.nki_name} "
                  f"(a trnsim bug; please report it)")
        if value is None:
            if not param.optional and param.kind is not Kind.FRONT_END:
                _fail(ArgumentError, ins, f"{key}=None; it must be {param.kind.value}")
            continue
        if value.__class__ is tuple and not value and param.kind is Kind.INTS:  # matmul's usual tiling
            continue
        if not _VALID[param.kind](value, param):
            _fail(ArgumentError, ins, f"{key}={_show(value)}; it must be {_expected(param)}")
        if (param.kind in _OPERATORS and value in alu.MAGNITUDE_OPS
                and core.generation < alu.MAGNITUDE_OPS_GENERATION):
            _fail(UnsupportedError, ins, f"{key}={value} needs NeuronCore generation "
                  f"{alu.MAGNITUDE_OPS_GENERATION} (trn3) or later; {_describe(core)} is generation "
                  f"{core.generation}", hint="choose a newer target")
        if param.unsupported and value in param.unsupported:
            _fail(UnsupportedError, ins, f"{key}={value} is not emulated", hint="see docs/nki.md")
        if core.generation < param.first_generation:
            _fail(UnsupportedError, ins, f"{key}= needs NeuronCore generation {param.first_generation} or "
                  f"later; {_describe(core)} is generation {core.generation}", hint="choose a newer target")
        if type(value) is InputRef:
            _check_tile_param(ins, key, param, ins.inputs[value.index])
        if seen is not None:
            if len(_LEGAL_PARAMS) >= _LEGAL_PARAMS_KEPT:
                _LEGAL_PARAMS.clear()
            _LEGAL_PARAMS.add(seen)


def _check_tile_param(ins: Instruction, key: str, param: Param, region: Region) -> None:
    """A scalar given as a tile holds one value per partition of the data it combines with."""
    if param.kind is not Kind.SCALAR:
        return
    partitions = (ins.outputs or ins.inputs)[0].partition_count
    if region.partition_count != partitions or region.elements_per_partition != 1:
        shape = f"[{region.partition_count}, {region.elements_per_partition}]"
        _fail(ShapeError, ins, f"{key} is a {shape} tile; a per-partition operand here is [{partitions}, 1]",
              hint="broadcast it to every partition first (e.g. with a matmul or iota), or pass a number")


_FP32_OVERFLOW = 3.4028235677973366e38
"""Immediates are fp32: a finite number from here on (fp32 max + half an ulp) rounds to infinity."""


def _number(value, param: Param) -> bool:
    kind = type(value)
    if kind is not float and kind is not int:  # the usual kinds skip the slower ABC test
        if kind is bool or not isinstance(value, Real):
            return False
    if abs(value) >= _FP32_OVERFLOW and math.isfinite(value):
        return False
    return (param.low is None or value >= param.low) and (param.high is None or value <= param.high)


def _integer(value, param: Param) -> bool:
    return not isinstance(value, bool) and isinstance(value, Integral) and _number(value, param)


def _ints(value, param: Param) -> bool:
    return isinstance(value, tuple | list) and all(_integer(v, param) for v in value)


def _pattern(value, param: Param) -> bool:
    return (isinstance(value, tuple | list) and len(value) > 0
            and all(_ints(pair, param) and len(pair) == 2 and pair[1] > 0 for pair in value))


PARTITION_REDUCTIONS = ("add", "average", "maximum", "bitwise_or", "bitwise_and")
"""tensor_partition_reduce's operators: "add, average, max, bitwise_or, bitwise_and" (nki.isa doc)."""

_OPERATORS = frozenset({Kind.ALU, Kind.ALU_OR_UNARY, Kind.REDUCE, Kind.PARTITION_REDUCE})

_VALID = {
    Kind.ALU: lambda value, param: type(value) is str and value in alu.ALU,
    Kind.ALU_OR_UNARY: lambda value, param: type(value) is str and (value in alu.ALU or value in alu.UNARY),
    Kind.REDUCE: lambda value, param: type(value) is str and value in alu.REDUCTIONS,
    Kind.PARTITION_REDUCE: lambda value, param: type(value) is str and value in PARTITION_REDUCTIONS,
    Kind.ACTIVATION: lambda value, param: type(value) is str and (value in alu.ACTIVATIONS
                                                                   or value == "prelu"),
    Kind.BOOL: lambda value, param: value is True or value is False or type(value).__name__ == "bool_",
    Kind.INT: _integer,
    Kind.NUMBER: _number,
    Kind.SCALAR: lambda value, param: type(value) is InputRef or _number(value, param),
    Kind.TILE: lambda value, param: type(value) is InputRef,
    Kind.CHOICE: lambda value, param: _hashable(value) and value in param.choices + param.unsupported,
    Kind.PATTERN: _pattern,
    Kind.OFFSET: lambda value, param: type(value) is RegisterRef or _integer(value, param),
    Kind.INTS: _ints,
    Kind.FRONT_END: lambda value, param: True,
}


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _expected(param: Param) -> str:
    """What a parameter takes, for the error message."""
    if param.kind is Kind.CHOICE:
        return f"one of {list(param.choices)}"
    if param.kind is Kind.ALU:
        return f"an ALU operator: {', '.join(sorted(alu.ALU))}"
    if param.kind is Kind.ALU_OR_UNARY:
        unary = ", ".join(sorted(alu.UNARY))
        return f"an ALU operator: {', '.join(sorted(alu.ALU))}; or a unary one: {unary}"
    if param.kind in (Kind.REDUCE, Kind.PARTITION_REDUCE):
        names = PARTITION_REDUCTIONS if param.kind is Kind.PARTITION_REDUCE else alu.REDUCTIONS
        return f"a reduction operator: {', '.join(sorted(names))}"
    bounds = [f">= {param.low}"] if param.low is not None else []
    bounds += [f"<= {param.high}"] if param.high is not None else []
    return param.kind.value + (f" ({' and '.join(bounds)})" if bounds else "")


def _show(value) -> str:
    """A parameter value as the user would recognise it (a tile is named, not printed)."""
    if type(value).__name__ in ("ndarray", "Tensor"):
        return f"a {type(value).__module__.split('.')[0]} array (use an SBUF tile or a number)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _wrong_memory(ins: Instruction, role: str, region: Region, allowed) -> None:
    names = "/".join(sorted(m.value.upper() for m in allowed))
    _fail(KernelError, ins, f"{role} {region.name!r} is in {region.memory.value.upper()}; "
          f"this instruction takes {role}s in {names}")


def _engine_memories(ins: Instruction, spec) -> None:
    """The memories one engine reaches for this instruction (InstructionSpec.engine_reads/writes)."""
    for role, regions, allowed in (("input", ins.inputs, spec.engine_reads.get(ins.engine)),
                                   ("output", ins.outputs, spec.engine_writes.get(ins.engine))):
        for region in regions:
            if allowed is not None and region.memory not in allowed:
                names = "/".join(sorted(m.value.upper() for m in allowed))
                _fail(KernelError, ins, f"{role} {region.name!r} is in {region.memory.value.upper()}; on the "
                      f"{ins.engine.value} engine this instruction takes {role}s in {names}",
                      hint="choose the engine that reaches that memory (engine=nisa.vector_engine), or "
                           "move the tile")


_TWO_FULL_INPUTS = frozenset({Opcode.TENSOR_TENSOR, Opcode.TENSOR_COPY_PREDICATED})


def _check_same_free_size(ins: Instruction) -> None:
    """Element-wise instructions produce one output element per input element."""
    dst = ins.outputs[0]
    for src in ins.inputs[:2 if ins.opcode in _TWO_FULL_INPUTS else 1]:
        if src.elements_per_partition != dst.elements_per_partition:
            _fail(ShapeError, ins, f"{src.name!r} has {src.elements_per_partition} elements per partition "
                  f"but dst {dst.name!r} has {dst.elements_per_partition}",
                  hint="element-wise operands and result must have the same free size")


def _describe(core) -> str:
    """e.g. 'NeuronCore-v3 (trn2, generation 3)'."""
    names = ", ".join(core.aliases)
    return f"{core.name} ({names + ', ' if names else ''}generation {core.generation})"


def _check_partitions(ins: Instruction, region: Region, core) -> None:
    if region.memory is Memory.HBM:
        return
    end = region.partition_start + region.partition_count
    if region.partition_count > core.partitions or end > core.partitions:
        _fail(ShapeError, ins, f"partition dimension of {region.name!r} is {region.partition_count} "
              f"(partitions {region.partition_start}..{end - 1}); {core.name} has {core.partitions}",
              hint="split the tile along its first dimension")
    if region.partition_start == 0 or ins.engine is Engine.DMA or ins.opcode in DMA:
        return
    if _mx_scale_of(ins, region):  # its start rule is _mx_scale's
        return
    allowed = _start_partitions(region.partition_count, core.partitions)
    if region.partition_start not in allowed:
        _fail(ShapeError, ins, f"{region.name!r} starts at partition {region.partition_start} with "
              f"{region.partition_count} partitions; engines can start such an access only at "
              f"{sorted(allowed)}", hint="move the tile so it starts at an allowed partition")


def _start_partitions(count: int, partitions: int) -> set[int]:
    """Over half the partitions: start 0; over a quarter: 0 or the half; else any quarter."""
    if count > partitions // 2:
        return {0}
    if count > partitions // 4:
        return {0, partitions // 2}
    return set(range(0, partitions, partitions // 4))


_free = attrgetter("elements_per_partition")
"""Elements per partition of a Region: `_free(region)`."""


def shape_of(region: Region) -> tuple[int, ...]:
    """The operand's shape as the kernel sees it: partitions then free dims on chip; every dim in HBM."""
    counts = tuple([count for _, count in region.pattern])
    return counts if region.memory is Memory.HBM else (region.partition_count, *counts)


@CHECK.register(Opcode.MATMUL)
def _matmul(ins: Instruction, core) -> None:
    """Tile limits, matching contraction, and the dtype pairing rules of nc_matmul."""
    dst = ins.outputs[0]
    stationary, moving = ins.inputs[0], ins.inputs[1]
    params = ins.params
    double_row = params.get("perf_mode") == "double_row"
    contraction = stationary.partition_count
    if contraction != moving.partition_count:
        _fail(ShapeError, ins, f"contraction mismatch: stationary has {contraction} "
              f"partitions, moving has {moving.partition_count}")
    rows = 2 if double_row else 1
    m_free, n_free = _free(stationary) // rows, _free(moving) // rows
    limit_n = core.matmul_max_moving_free_bf16_dst if dst.dtype == "bfloat16" else core.matmul_max_moving_free
    for label, value, limit in (("contraction K", contraction, core.matmul_max_contraction),
                                ("stationary free size M", m_free, core.matmul_max_stationary_free),
                                ("moving free size N", n_free, limit_n)):
        if value > limit:
            _fail(ShapeError, ins, f"{label} is {value}; the limit on {core.name} is {limit}",
                  hint="tile the matmul")
    if params.get("tile_size") or params.get("tile_position"):
        _matmul_tiling(ins, core, contraction, m_free)
    dst_free = _free(dst)
    if dst.partition_count != m_free or dst_free != n_free:
        _fail(ShapeError, ins, f"dst {dst.name!r} is [{dst.partition_count}, {dst_free}] but "
              f"stationary.T @ moving is [{m_free}, {n_free}]")
    if params.get("is_transpose"):
        return  # transpose mode may write 16-bit results and pair any dtypes: bits move unchanged
    _matmul_dtypes(ins, core, stationary.dtype, moving.dtype, dst.dtype, double_row)
    _psum_bank(ins, core, dst)


def _matmul_tiling(ins: Instruction, core, rows: int, cols: int) -> None:
    """tile_size from {128, 64} (and 32 from generation 3), positions on multiples of it (called
    when the matmul gives either)."""
    size, position = ins.params.get("tile_size") or (), ins.params.get("tile_position") or ()
    if ins.param("perf_mode") == "double_row":
        _fail(ShapeError, ins, "perf_mode=double_row cannot be combined with tile_position/tile_size")
    full = core.partitions
    allowed = set(core.matmul_tile_sizes)
    size = tuple(size) or (full, full)
    if len(size) != 2 or any(s not in allowed for s in size):
        _fail(ShapeError, ins, f"tile_size={size}; {_describe(core)} allows sizes {sorted(allowed)}")
    position = tuple(position) or (0, 0)
    if len(position) != 2 or any(p % s or not 0 <= p < full for p, s in zip(position, size, strict=True)):
        _fail(ShapeError, ins, f"tile_position={position} must be multiples of tile_size={size} inside "
              f"the {full}x{full} array")
    if rows > size[0] or cols > size[1]:
        _fail(ShapeError, ins, f"a [{rows}, {cols}] stationary tile does not fit tile_size={size}")


_FP32_OPERANDS = ("float32", "tfloat32")


_MATMUL_OPERANDS = frozenset({"bfloat16", "float16", *_FP32_OPERANDS, *FP8_KINDS})
"""The Tensor Engine's input dtypes: fp8, bf16, fp16, tf32, fp32 (nki.isa.nc_matmul, reference
nki.md section 1.3); integers are not among them."""


def _matmul_dtypes(ins: Instruction, core, a: str, b: str, dst: str, double_row: bool) -> None:
    for role, dtype in (("stationary", a), ("moving", b)):
        if dtype not in _MATMUL_OPERANDS:
            _fail(DTypeError, ins, f"{role} is {dtype}; the Tensor Engine takes fp8, bf16, fp16, tf32 or "
                  f"fp32 operands", hint="cast with nisa.tensor_copy into a float tile first")
    if (a in _FP32_OPERANDS or b in _FP32_OPERANDS) and a != b:
        _fail(DTypeError, ins, f"operands are {a} and {b}: if one is fp32/tf32 the other must be too")
    if a in FP8_KINDS and b in FP8_KINDS and {a, b} == {"float8_e4m3", "float8_e4m3fn"}:
        _fail(DTypeError, ins, f"mixed fp8 kinds {a} and {b} in one matmul",
              hint="use one E4M3 flavour for both operands")
    bf16_dst = core.matmul_max_moving_free_bf16_dst > core.matmul_max_moving_free
    allowed = ("bfloat16", "float32") if bf16_dst else ("float32",)
    if dst not in allowed:
        _fail(DTypeError, ins, f"matmul result dtype is {dst}; {core.name} writes {sorted(allowed)} to PSUM")
    if double_row:
        if "double_row" not in core.matmul_perf_modes:
            _fail(UnsupportedError, ins, f"perf_mode=double_row is not a mode of {_describe(core)}",
                  hint="choose trn2 or later")
        if a not in FP8_KINDS or b not in FP8_KINDS:
            _fail(DTypeError, ins, f"perf_mode=double_row takes fp8 operands, not {a}/{b}")


def _psum_bank(ins: Instruction, core, region: Region) -> None:
    """A matmul result must stay inside one PSUM bank unless the target streams across banks."""
    first, last = region.byte_span()
    bank = core.psum_bank_bytes
    spans_banks = first // bank != last // bank
    # A result larger than a bank (allowed on targets whose N limit says so) starts at a bank.
    if spans_banks and (last - first + 1 <= bank or first % bank):
        _fail(KernelError, ins, f"PSUM result {region.name!r} covers bytes {first}..{last} and crosses a "
              f"{bank} B bank boundary", hint="keep each matmul result inside one PSUM bank")


MX_PACKED = ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")


@CHECK.register(Opcode.MATMUL_MX)
def _matmul_mx(ins: Instruction, core) -> None:
    dst, stationary, moving = ins.outputs[0], ins.inputs[0], ins.inputs[1]
    for operand in (stationary, moving):
        if operand.dtype not in MX_PACKED:
            _fail(DTypeError, ins, f"{operand.name!r} is {operand.dtype}; "
                  f"nc_matmul_mx takes {list(MX_PACKED)}")
    if stationary.partition_count != moving.partition_count:
        _fail(ShapeError, ins, f"contraction mismatch: stationary has {stationary.partition_count} "
              f"partitions, moving has {moving.partition_count}")
    m_free, n_free = _free(stationary), _free(moving)
    for label, value, limit in (("stationary free size M", m_free, core.matmul_max_stationary_free),
                                ("moving free size N", n_free, core.matmul_max_moving_free)):
        if value > limit:
            _fail(ShapeError, ins, f"{label} is {value}; the limit on {core.name} is {limit}")
    if dst.partition_count != m_free or _free(dst) != n_free:
        _fail(ShapeError, ins, f"dst {dst.name!r} is [{dst.partition_count}, {_free(dst)}] but the MX "
              f"product is [{m_free}, {n_free}]")
    _mx_scale(ins, ins.inputs[2], stationary.partition_count, m_free)
    _mx_scale(ins, ins.inputs[3], moving.partition_count, n_free)
    _psum_bank(ins, core, dst)


MX_SCALE_OFFSETS = (0, 4, 8, 12)
"""Where in its quadrant an MX scale tile may start: quantize_mx and nc_matmul_mx write and read
scales at offset 0, 4, 8 or 12, so up to four tensors' scales share one tile (NKI MXFP matmul
guide, "Packing Scale Values")."""


def _mx_scale_of(ins: Instruction, region: Region) -> bool:
    """Whether `region` is a scale operand of an MX instruction (its start rule is _mx_scale's)."""
    scales = ins.outputs[1:] if ins.opcode is Opcode.QUANTIZE_MX else ins.inputs[2:]
    return ins.opcode in (Opcode.QUANTIZE_MX, Opcode.MATMUL_MX) and any(region is s for s in scales)


def _mx_scale(ins: Instruction, scale: Region, partitions: int, columns: int) -> None:
    """One E8M0 byte per MX group (8 partitions) and column: the scale tile has a row for each group
    (in group order, or in the quadrant layout of core/execute_mx.py) and `columns` bytes in it; it
    starts at one of the MX_SCALE_OFFSETS of a quadrant."""
    if scale.partition_start % QUADRANT not in MX_SCALE_OFFSETS:
        _fail(ShapeError, ins, f"scale {scale.name!r} starts at partition {scale.partition_start}; MX scales "
              f"sit at offset 0, 4, 8 or 12 of a {QUADRANT}-partition quadrant",
              hint="slice the scale tile from one of those partitions")
    groups = -(-partitions // GROUP_PARTITIONS)
    last_row = scale_rows(groups, scale.partition_count)[-1]
    if scale.dtype_bytes != 1 or last_row >= scale.partition_count or _free(scale) < columns:
        _fail(ShapeError, ins, f"scale {scale.name!r} is [{scale.partition_count}, {_free(scale)}] "
              f"{scale.dtype}; the scales of {groups} MX groups x {columns} columns need one byte each, in "
              f"partitions up to {last_row} and {columns} elements per partition")


@CHECK.register(Opcode.QUANTIZE_MX)
def _quantize_mx(ins: Instruction, core) -> None:
    src, dst = ins.inputs[0], ins.outputs[0]
    if src.dtype not in ("bfloat16", "float16"):
        _fail(DTypeError, ins, f"quantize_mx reads bf16 or fp16, not {src.dtype}")
    if dst.dtype not in MX_PACKED[:2]:
        _fail(DTypeError, ins, f"quantize_mx writes {list(MX_PACKED[:2])}, not {dst.dtype}")
    shape_ok = src.partition_count == dst.partition_count and _free(src) == 4 * _free(dst)
    if src.partition_count % 8 or not shape_ok:
        _fail(ShapeError, ins, f"quantize_mx needs src [P, 4F] and dst [P, F] with P a multiple of 8; got "
              f"[{src.partition_count}, {_free(src)}] and [{dst.partition_count}, {_free(dst)}]")
    _mx_scale(ins, ins.outputs[1], src.partition_count, _free(dst))


# The rest of the table, registered by group (at import, never lazily).
from trnsim.core import check_gpsimd, check_vector  # noqa: E402, F401
from trnsim.core.check_data import check_packed  # noqa: E402
