"""How long one instruction takes on one NeuronCore generation: the COST table.

`COST[opcode](ins, core)` returns seconds. Every constant comes from `trnsim.hardware` (the core's
engines, DMA figures and its `costs` table, each with its source); nothing here knows which
generation it is timing, so one trace can be re-timed for trn1, trn2 and trn3. The scheduler
(`timing.schedule`) adds what one instruction cannot know: engine queues and dependencies.

Model, in short (docs/timing.md has the detail and the calibration):
* Tensor Engine: initiation interval max(floor, moving free size / rows per pass), times the fp32
  factor; LoadStationary runs in the background and only shows when longer than the MM.
* Vector/Scalar/GpSimd: the per-instruction table max(floor, MIN_II, fixed + per-element x N),
  N elements per partition divided by the engine's dtype speed-up (gen3+ bf16 modes), doubled
  when a minor stride exceeds the SBUF interface width, plus the fixed access overhead.
* DMA: bytes / (per-queue bandwidth x efficiency) on its queue; small rows and transposes lower
  the efficiency. The fixed cost per transfer is an issue latency (`issue_latency_s`) that
  overlaps the transfer ahead on the same queue.
"""

from __future__ import annotations

import math

from trnsim import hardware
from trnsim.core.isa import DMA as DMA_OPCODES
from trnsim.core.isa import SPECS, Engine, Memory, Opcode
from trnsim.core.rules import RuleTable
from trnsim.core.trace import Instruction, Region
from trnsim.errors import ConfigError, UnsupportedError
from trnsim.hardware.specs import CoreSpec

COST = RuleTable("COST")

_WIDTH_CLASS = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3": "fp8", "float8_e5m2": "fp8",
                "float8_e4m3fn": "fp8"}
"""dtype name -> the engine width class ("default" for every other dtype)."""

_FP32 = frozenset({"float32"})


def core_spec(target: str | CoreSpec) -> CoreSpec:
    """The NeuronCore generation for a target name ("trn1", "trn2", "NeuronCore-v4", ...)."""
    if isinstance(target, CoreSpec):
        return target
    core = hardware.core(target)
    if core.partial:
        raise ConfigError(f"target {target!r} ({core.name}) has no published timing figures",
                          hint="time kernels for trn1, trn2 or trn3")
    return core


def instruction_seconds(ins: Instruction, target: str | CoreSpec) -> float:
    """Seconds `ins` keeps its engine (or DMA queue) busy on `target`."""
    core = core_spec(target)
    first = SPECS[ins.opcode].first_generation
    if core.generation < first:
        raise UnsupportedError(
            f"{ins}: {SPECS[ins.opcode].nki_name} needs NeuronCore-v{first} or later; "
            f"{core.name} does not have it", what=SPECS[ins.opcode].nki_name, target=core.name,
            hint="time this trace on a generation that has the instruction")
    return COST[ins.opcode](ins, core)


def width_class(regions: tuple[Region, ...]) -> str:
    """The engine width class shared by all operands, or "default" if they differ."""
    classes = {_WIDTH_CLASS.get(r.dtype, "default") for r in regions}
    return classes.pop() if len(classes) == 1 else "default"


def _per_partition(regions: tuple[Region, ...]) -> int:
    """Elements per partition the engine streams: the largest operand's free size."""
    return max((r.elements_per_partition for r in regions), default=1)


def _strided(regions: tuple[Region, ...], limit_bytes: int) -> bool:
    """True when an on-chip operand's most-minor stride exceeds the interface width."""
    for region in regions:
        if region.memory is not Memory.HBM and region.pattern:
            stride, count = region.pattern[-1]
            if count > 1 and abs(stride) * region.dtype_bytes > limit_bytes:
                return True
    return False


def _contiguous(regions: tuple[Region, ...]) -> bool:
    return all(not r.pattern or r.pattern[-1][0] == 1 for r in regions)


def _engine_seconds(core: CoreSpec, engine: Engine, cycles: float) -> float:
    """Cycles on `engine`, in seconds (the SBUF/PSUM access overhead is `issue_latency_s`)."""
    return cycles / core.engines[engine.value].clock_hz


def table_seconds(ins: Instruction, core: CoreSpec, entry: str, speedup: float = 1.0) -> float:
    """An instruction costed by the per-instruction table entry `entry` (nki.md §1.5)."""
    costs = core.costs
    rule = costs.instructions[entry]
    regions = ins.outputs + ins.inputs
    per_element = rule.cycles_per_element / speedup
    if _strided(regions, costs.stride_penalty_min_bytes):
        per_element *= costs.stride_penalty_factor
    body = rule.fixed_cycles + per_element * _per_partition(regions)
    cycles = max(rule.floor_cycles, costs.min_ii_cycles, body)
    return _engine_seconds(core, ins.engine, cycles)


def mode_speedup(ins: Instruction, core: CoreSpec) -> float:
    """Elements per partition per cycle of the engine for these operands (gen3+ bf16/fp8 modes).

    The width tables give 128 lanes on NC-v2 (speed-up 1); NC-v3/v4 Vector reads 512 bf16 or
    256 other elements per cycle. Strided bf16 data falls back to the default width.
    """
    regions = ins.outputs + ins.inputs
    engine = core.engines[ins.engine.value]
    wide = width_class(regions) if _contiguous(regions) else "default"
    return engine.width(wide) / core.partitions


def _elementwise(entry: str):
    def rule(ins: Instruction, core: CoreSpec) -> float:
        return table_seconds(ins, core, entry, mode_speedup(ins, core))
    rule.__name__ = f"_{entry}_seconds"
    return rule


for _opcode, _entry in (
    (Opcode.ACTIVATION, "activation"), (Opcode.ACTIVATION_REDUCE, "activation_reduce"),
    (Opcode.TENSOR_SCALAR, "tensor_scalar"), (Opcode.TENSOR_TENSOR_SCAN, "tensor_tensor_scan"),
    (Opcode.RECIPROCAL, "reciprocal"), (Opcode.BN_STATS, "bn_stats"), (Opcode.BN_AGGR, "bn_aggr"),
    (Opcode.IOTA, "iota"), (Opcode.AFFINE_SELECT, "affine_select"), (Opcode.MAX8, "max8"),
    (Opcode.FIND_INDEX8, "nc_find_index8"), (Opcode.MATCH_REPLACE8, "nc_find_index8"),
    (Opcode.TENSOR_SCALAR_REDUCE, "tensor_scalar"), (Opcode.EXPONENTIAL, "activation"),
    (Opcode.RANGE_SELECT, "tensor_scalar"), (Opcode.SELECT_REDUCE, "tensor_scalar"),
    (Opcode.DROPOUT, "tensor_scalar"), (Opcode.RNG, "tensor_copy"),
    (Opcode.STREAM_SHUFFLE, "tensor_copy"), (Opcode.QUANTIZE_MX, "tensor_scalar"),
    (Opcode.TENSOR_PARTITION_REDUCE, "tensor_reduce"), (Opcode.LOCAL_GATHER, "tensor_copy"),
    (Opcode.N_GATHER, "tensor_copy"), (Opcode.TENSOR_COPY_PREDICATED, "tensor_tensor"),
    (Opcode.SEQUENCE_BOUNDS, "tensor_tensor_scan"), (Opcode.NONZERO_WITH_COUNT, "tensor_tensor_scan"),
    (Opcode.RAND_SET_STATE, "tensor_copy"), (Opcode.RAND_GET_STATE, "tensor_copy"),
):
    COST.register(_opcode)(_elementwise(_entry))


@COST.register(Opcode.TENSOR_COPY)
def _tensor_copy_seconds(ins: Instruction, core: CoreSpec) -> float:
    """A copy whose source offset is a runtime register pays the dynamic-copy floor."""
    entry = "tensor_copy_dynamic" if ins.param("dynamic_offset") else "tensor_copy"
    return table_seconds(ins, core, entry, mode_speedup(ins, core))


def _all_dtype(ins: Instruction, names: frozenset[str]) -> bool:
    return all(r.dtype in names for r in ins.outputs + ins.inputs)


_BF16 = frozenset({"bfloat16"})
_ONE_PASS_OPS = frozenset({"add", "subtract", "multiply"})


@COST.register(Opcode.TENSOR_TENSOR)
def _tensor_tensor_seconds(ins: Instruction, core: CoreSpec) -> float:
    """One pass when an operand streams from PSUM or for contiguous all-bf16 add/sub/mul."""
    from_psum = any(r.memory is Memory.PSUM for r in ins.inputs)
    bf16_fast = (_all_dtype(ins, _BF16) and _contiguous(ins.inputs)
                 and str(ins.param("op", "")) in _ONE_PASS_OPS)
    entry = "tensor_tensor_one_pass" if from_psum or bf16_fast else "tensor_tensor"
    return table_seconds(ins, core, entry, mode_speedup(ins, core))


def fits_psum_bank(region: Region, core: CoreSpec) -> bool:
    """Whether a TensorE result stays in PSUM: a PSUM tile holds at most one bank per partition
    (`tile_size.psum_fmax`), so a wider broadcast goes on to SBUF."""
    return region.elements_per_partition * region.dtype_bytes <= core.psum_bank_bytes


def psum_operand_seconds(ins: Instruction, core: CoreSpec) -> float:
    """A tensor_tensor reading a partition broadcast the compiler ran on the Tensor Engine, whose
    result (one PSUM bank at most) stays in PSUM: the operand streams from PSUM, one pass."""
    return table_seconds(ins, core, "tensor_tensor_one_pass", mode_speedup(ins, core))


@COST.register(Opcode.TENSOR_REDUCE)
def _tensor_reduce_seconds(ins: Instruction, core: CoreSpec) -> float:
    fast = _all_dtype(ins, _BF16) and str(ins.param("op", "")) in {"add", "max", "maximum"}
    entry = "tensor_reduce_bf16_fast" if fast else "tensor_reduce"
    return table_seconds(ins, core, entry, mode_speedup(ins, core))


@COST.register(Opcode.MEMSET)
def _memset_seconds(ins: Instruction, core: CoreSpec) -> float:
    zero_16bit = ins.param("value", 0) == 0 and _all_dtype(ins, frozenset({"bfloat16", "float16"}))
    entry = "memset_zero_16bit" if zero_16bit else "memset"
    return table_seconds(ins, core, entry, mode_speedup(ins, core))


@COST.register(Opcode.SCALAR_TENSOR_TENSOR)
def _scalar_tensor_tensor_seconds(ins: Instruction, core: CoreSpec) -> float:
    pattern = (str(ins.param("op0", "")), str(ins.param("op1", "")))
    fast = _all_dtype(ins, _BF16) and pattern == ("subtract", "multiply")
    entry = "scalar_tensor_tensor_bf16_fast" if fast else "scalar_tensor_tensor"
    return table_seconds(ins, core, entry, mode_speedup(ins, core))


def matmul_rows_per_pass(ins: Instruction, core: CoreSpec) -> float:
    """fp8 double-row mode lays both contraction rows out in the free dims ([128, 2, N]), so
    the free size counts each column twice and the array streams two per cycle."""
    if ins.param("perf_mode") == "double_row":
        if "double_row" not in core.matmul_perf_modes:
            raise ConfigError(f"{ins}: perf_mode=double_row is not a mode of {core.name}",
                              hint="time this trace on a generation that has it (trn2 or later)")
        tensor = core.engines[Engine.TENSOR.value]
        return tensor.width("fp8") / tensor.width("default")
    return 1.0


def matmul_values_per_item(ins: Instruction, core: CoreSpec) -> float:
    """MX quad mode: each stored x4 item packs this many contraction values (K = 4 x P)."""
    if ins.opcode is Opcode.MATMUL_MX:
        tensor = core.engines[Engine.TENSOR.value]
        return tensor.width("mx") / tensor.width("default")
    return 1.0


@COST.register(Opcode.MATMUL, Opcode.MATMUL_MX)
def _matmul_seconds(ins: Instruction, core: CoreSpec) -> float:
    """Stream the moving tile through the array; a fast LoadStationary hides behind the MM."""
    costs = core.costs
    stationary, moving = ins.inputs[0], ins.inputs[1]
    moving_cycles = moving.elements_per_partition / matmul_rows_per_pass(ins, core)
    load_stationary_cycles = stationary.elements_per_partition / costs.fast_load_stationary_speedup
    cycles = max(costs.matmul_min_ii_cycles, moving_cycles, load_stationary_cycles)
    if any(r.dtype in _FP32 for r in ins.inputs):
        cycles *= costs.matmul_fp32_factor
    return _engine_seconds(core, Engine.TENSOR, cycles)


def broadcast_seconds(ins: Instruction, core: CoreSpec) -> float:
    """A partition broadcast (one partition copied to many) as the compiler runs it: on the
    Tensor Engine, a matmul by a row of ones streaming the source's free size (fp32 at the fp32
    factor), leaving VectorE free [reference nki.md §1.3; issue 14]."""
    costs = core.costs
    cycles = max(costs.matmul_min_ii_cycles, ins.inputs[0].elements_per_partition)
    if any(r.dtype in _FP32 for r in ins.inputs):
        cycles *= costs.matmul_fp32_factor
    return _engine_seconds(core, Engine.TENSOR, cycles)


@COST.register(Opcode.TRANSPOSE)
def _transpose_seconds(ins: Instruction, core: CoreSpec) -> float:
    """PE transpose: max(P, min(64, F)) cycles (nki.md §1.5); on Vector, a 32x32 copy."""
    if ins.engine is not Engine.TENSOR:
        return table_seconds(ins, core, "tensor_copy", mode_speedup(ins, core))
    source = ins.inputs[0]
    cycles = max(source.partition_count,
                 min(core.costs.matmul_min_ii_cycles, source.elements_per_partition))
    return _engine_seconds(core, Engine.TENSOR, cycles)


def dma_row_bytes(ins: Instruction) -> float:
    """Bytes per partition row of a transfer: the on-chip side's, or the whole HBM copy's."""
    rows = [r.elements_per_partition * r.dtype_bytes for r in ins.outputs + ins.inputs
            if r.memory is not Memory.HBM]
    return min(rows) if rows else float(dma_bytes(ins))


def dma_bytes(ins: Instruction) -> int:
    """Bytes a transfer moves; a cast is charged at the wider of its two element sizes."""
    regions = ins.outputs + ins.inputs
    elements = max(r.elements for r in regions)
    return int(math.ceil(elements * max(r.dtype_bytes for r in regions)))


def dma_efficiency(ins: Instruction, core: CoreSpec) -> float:
    """Fraction of the per-queue bandwidth a transfer reaches (small rows, transposes)."""
    costs = core.costs
    efficiency = 1.0
    if dma_row_bytes(ins) < costs.dma_min_efficient_bytes_per_partition:
        efficiency = costs.dma_small_transfer_efficiency
    if ins.opcode is Opcode.DMA_TRANSPOSE:
        on_chip_source = all(r.memory is not Memory.HBM for r in ins.inputs)
        efficiency *= (costs.dma_transpose_sbuf_efficiency if on_chip_source
                       else costs.dma_transpose_hbm_efficiency)
    return efficiency


@COST.register(Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE, Opcode.SENDRECV)
def _dma_seconds(ins: Instruction, core: CoreSpec) -> float:
    """The payload at this queue's achievable rate (the fixed cost is `issue_latency_s`)."""
    rate_bytes_per_s = core.dma_bytes_per_s_per_queue * dma_efficiency(ins, core)
    return dma_bytes(ins) / rate_bytes_per_s


def issue_latency_s(ins: Instruction, core: CoreSpec) -> float:
    """Time between an instruction being able to go and its data moving: a DMA's descriptor and
    semaphore cost, or a compute instruction's SBUF/PSUM access overhead. It overlaps the
    instruction ahead of it on the same queue or engine ("compute engines can typically hide
    some of this latency through instruction level parallelism" [S9]), so a stream pays it once,
    while an instruction that waits for data pays it each time."""
    if ins.opcode in DMA_OPCODES:
        return core.dma_fixed_latency_s
    if ins.engine in _ACCESSING and ins.opcode not in _NO_ACCESS:
        return core.costs.access_overhead_cycles / core.engines[ins.engine.value].clock_hz
    return 0.0


_ACCESSING = frozenset({Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD})
_NO_ACCESS = frozenset({Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD, Opcode.REGISTER_STORE,
                        Opcode.CORE_BARRIER, Opcode.COLLECTIVE})


@COST.register(Opcode.CORE_BARRIER)
def _barrier_seconds(ins: Instruction, core: CoreSpec) -> float:
    """A barrier is one semaphore round trip, the fixed part of a DMA."""
    return core.dma_fixed_latency_s


@COST.register(Opcode.COLLECTIVE)
def _collective_seconds(ins: Instruction, core: CoreSpec) -> float:
    """nki.collectives: trnsim.system's collective model for the instruction's replica group."""
    from trnsim.system.collectives import instruction_seconds  # system builds on timing's layers

    return instruction_seconds(ins, core)


@COST.register(Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD, Opcode.REGISTER_STORE)
def _register_seconds(ins: Instruction, core: CoreSpec) -> float:
    """Register traffic: the static instruction overhead, counted at the Scalar engine's clock.

    The Sync engine's clock is not published; the Scalar engine's is the closest documented one.
    """
    return core.costs.static_overhead_cycles / core.engines[Engine.SCALAR.value].clock_hz
