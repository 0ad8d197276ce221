"""What the NeuronCore can do: the closed list of instructions trnsim knows.

`Opcode` names every instruction; `SPECS[opcode]` is its one `InstructionSpec` (the engines that
may run it, the NKI call that issues it, the memories its operands may live in, the first
generation that has it). Everything that interprets an instruction (execute, check, cost) keys a
table on `Opcode`, and a coverage test checks that each table has a rule for every member.
Named groups (`ELEMENTWISE`, `MATMUL`, `DMA`, ...) replace scattered `if` tests.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Engine(enum.Enum):
    """The units that run instructions; values are the `nki.isa.engine` member names."""

    __hash__ = object.__hash__  # members are singletons; the C-level hash keeps table lookups cheap

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"
    SYNC = "sync"


class Memory(enum.Enum):
    """Where an operand lives. SBUF and PSUM are 2-D (partition x bytes); HBM is linear."""

    __hash__ = object.__hash__  # members are singletons; the C-level hash keeps table lookups cheap

    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"


class Opcode(enum.Enum):
    """Every instruction trnsim emulates. One member per ISA operation."""

    __hash__ = object.__hash__  # members are singletons; the C-level hash keeps table lookups cheap

    DMA_COPY = "dma_copy"
    DMA_TRANSPOSE = "dma_transpose"
    TENSOR_COPY = "tensor_copy"
    TENSOR_COPY_PREDICATED = "tensor_copy_predicated"
    MEMSET = "memset"
    IOTA = "iota"
    MATMUL = "nc_matmul"
    MATMUL_MX = "nc_matmul_mx"
    TRANSPOSE = "nc_transpose"
    ACTIVATION = "activation"
    ACTIVATION_REDUCE = "activation_reduce"
    TENSOR_TENSOR = "tensor_tensor"
    TENSOR_SCALAR = "tensor_scalar"
    SCALAR_TENSOR_TENSOR = "scalar_tensor_tensor"
    TENSOR_REDUCE = "tensor_reduce"
    TENSOR_SCALAR_REDUCE = "tensor_scalar_reduce"
    TENSOR_TENSOR_SCAN = "tensor_tensor_scan"
    TENSOR_PARTITION_REDUCE = "tensor_partition_reduce"
    BN_STATS = "bn_stats"
    BN_AGGR = "bn_aggr"
    RECIPROCAL = "reciprocal"
    EXPONENTIAL = "exponential"
    AFFINE_SELECT = "affine_select"
    RANGE_SELECT = "range_select"
    SELECT_REDUCE = "select_reduce"
    MAX8 = "max8"
    FIND_INDEX8 = "nc_find_index8"
    MATCH_REPLACE8 = "nc_match_replace8"
    STREAM_SHUFFLE = "nc_stream_shuffle"
    LOCAL_GATHER = "local_gather"
    N_GATHER = "nc_n_gather"
    SEQUENCE_BOUNDS = "sequence_bounds"
    NONZERO_WITH_COUNT = "nonzero_with_count"
    QUANTIZE_MX = "quantize_mx"
    RNG = "rng"
    DROPOUT = "dropout"
    RAND_SET_STATE = "rand_set_state"
    RAND_GET_STATE = "rand_get_state"
    REGISTER_MOVE = "register_move"
    REGISTER_LOAD = "register_load"
    REGISTER_STORE = "register_store"
    SENDRECV = "sendrecv"
    CORE_BARRIER = "core_barrier"
    COLLECTIVE = "collective"


_ON_CHIP = frozenset({Memory.SBUF, Memory.PSUM})
_SBUF = frozenset({Memory.SBUF})
_PSUM = frozenset({Memory.PSUM})
_ANY = frozenset(Memory)
_COMPUTE = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


class Kind(enum.Enum):
    """What a parameter's value may be; core/check.py has one validator per kind."""

    __hash__ = object.__hash__  # members are singletons; the C-level hash keeps table lookups cheap

    ALU = "an ALU operator (nl.add, nl.maximum, ...)"
    ALU_OR_UNARY = "an ALU operator, or a unary one (nl.abs, nl.rsqrt, ...) with operand0 None or 0"
    REDUCE = "a reduction operator (add, multiply, maximum, minimum, a bitwise or logical op)"
    PARTITION_REDUCE = "add, average, maximum, bitwise_or or bitwise_and (nki.isa.tensor_partition_reduce)"
    ACTIVATION = "an activation function (nl.exp, nl.relu, ...)"
    BOOL = "True or False"
    INT = "an integer"
    NUMBER = "a number that fp32 holds (finite ones up to 3.4e38, or +-inf)"
    SCALAR = "a number that fp32 holds or a [P, 1] tile (one value per partition)"
    TILE = "a tile"
    CHOICE = "one of the listed values"
    PATTERN = "an access pattern [[step, count], ...]"
    OFFSET = "an integer (int32), or a register (nisa.register_alloc) read when the instruction runs"
    INTS = "a sequence of integers"
    FRONT_END = "set by trnsim's front end"


@dataclass(frozen=True)
class RegisterRef:
    """A parameter whose value is in a scalar register: read when the instruction runs, so a
    trace_only run (no values) records it as a simulate run does."""

    register: int


@dataclass(frozen=True)
class Param:
    """One instruction parameter: its kind, whether None is allowed, its legal values or range,
    values NKI has but trnsim does not emulate, and the generation that introduced it."""

    kind: Kind
    optional: bool = False
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    unsupported: tuple = ()
    first_generation: int = 2


@dataclass(frozen=True, kw_only=True)
class InstructionSpec:
    """The contract of one opcode: everything the generic checks need to refuse a bad instruction.

    `engines[0]` is the engine used when the kernel does not choose one. `outputs`/`inputs` name
    the data operands in the order the front end passes them (a trailing `?` marks an optional
    one, `*` any number more); tiles passed as parameters (a [P,1] bias, an operand) follow, named
    by their parameter. `reads`/`writes` are the memories data operands may live in, narrowed for
    one engine by `engine_reads`/`engine_writes` (a Tensor Engine transpose writes PSUM). `params` are
    the parameters with their kinds and ranges. `first_generation` is the NeuronCore generation
    (2 = trn1/inf2, 3 = trn2, 4 = trn3) that introduced the instruction. Shape relations between
    operands are the opcode's CHECK rule (core/check.py).
    """

    opcode: Opcode
    engines: tuple[Engine, ...]
    outputs: tuple[str, ...] = ("dst",)
    inputs: tuple[str, ...] = ("data",)
    params: Mapping[str, Param] = field(default_factory=dict)
    reads: frozenset[Memory] = _ON_CHIP
    writes: frozenset[Memory] = _ON_CHIP
    engine_reads: Mapping[Engine, frozenset[Memory]] = field(default_factory=dict)
    engine_writes: Mapping[Engine, frozenset[Memory]] = field(default_factory=dict)
    first_generation: int = 2

    @property
    def nki_name(self) -> str:
        return f"nisa.{self.opcode.value}"

    def operand_name(self, role: str, index: int) -> str:
        """The NKI argument name of the `index`-th output or input."""
        names = self.outputs if role == "output" else self.inputs
        if index < len(names):
            return names[index].rstrip("?*")
        return names[-1].rstrip("?*") if names and names[-1].endswith("*") else f"{role} {index}"


def _spec(opcode: Opcode, *engines: Engine, **facts) -> InstructionSpec:
    return InstructionSpec(opcode=opcode, engines=engines, **facts)


_V, _S, _G, _T = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.TENSOR

_ALU, _ALU_OPT = Param(Kind.ALU), Param(Kind.ALU, optional=True)
_REDUCE = Param(Kind.REDUCE)
_BOOL = Param(Kind.BOOL)
_INT = Param(Kind.INT)
_NUMBER = Param(Kind.NUMBER)
_SCALAR, _SCALAR_OPT = Param(Kind.SCALAR), Param(Kind.SCALAR, optional=True)
_FRONT_END = Param(Kind.FRONT_END)
_INT32 = {"low": -2 ** 31, "high": 2 ** 31 - 1}  # iota / affine_select compute in 32-bit integers (the doc)
_AFFINE = {"pattern": Param(Kind.PATTERN, **_INT32), "offset": Param(Kind.OFFSET, **_INT32),
           "channel_multiplier": Param(Kind.INT, **_INT32)}
_MAXIMUM_ONLY = Param(Kind.CHOICE, choices=("maximum",))  # range_select / select_reduce: "only nl.maximum"
_COMPARISONS = Param(Kind.CHOICE, choices=("equal", "less", "less_equal", "greater", "greater_equal"))
# affine_select's cmp_op: "comparison operator to use for predicate evaluation" (nki.isa.affine_select)
_AFFINE_COMPARISON = Param(Kind.CHOICE, choices=("equal", "not_equal", "less", "less_equal", "greater",
                                                  "greater_equal"))
_REDUCE_CMD = Param(Kind.CHOICE, choices=("idle", "reset", "reduce", "reset_reduce"))
_REDUCTION = {"reduce_op": _REDUCE, "reduce_cmd": _REDUCE_CMD}
# exponential and tensor_scalar_reduce can also load reduce_init into the accumulator (their docs)
_LOADING_REDUCTION = {"reduce_op": _REDUCE, "reduce_init": _SCALAR_OPT,
                      "reduce_cmd": Param(Kind.CHOICE, choices=(*_REDUCE_CMD.choices, "load_reduce"))}
_DGE_MODE = Param(Kind.CHOICE, choices=(0, 1, 2, 3))  # nisa.dge_mode: unknown, swdge, hwdge, none
_TILING = Param(Kind.INTS)  # tile_position / tile_size: () or (rows, cols); CHECK knows the values
_MATMUL = {"accumulate": Param(Kind.BOOL, optional=True), "tile_position": _TILING,
           "tile_size": _TILING, "moving_free": _FRONT_END}
_ACTIVATE2 = Param(Kind.ALU, optional=True, first_generation=4)
_SCALAR_ENGINE_OPS = {
    "op": Param(Kind.ACTIVATION), "bias": _SCALAR_OPT, "scale": _SCALAR, **_REDUCTION,
    # activate2 (trn3): op((data op0 imm0) op1 imm1)
    "op0": _ACTIVATE2, "imm0": _SCALAR_OPT, "reverse0": Param(Kind.BOOL, optional=True),
    "op1": _ACTIVATE2, "imm1": _SCALAR_OPT, "reverse1": Param(Kind.BOOL, optional=True),
    "relu_param": _SCALAR_OPT,
}
_TWO_OPS = {"op0": _ALU, "operand0": _SCALAR, "reverse0": _BOOL, "op1": _ALU_OPT, "operand1": _SCALAR_OPT,
            "reverse1": _BOOL}
_OP0 = Param(Kind.ALU_OR_UNARY)  # tensor_scalar(_reduce): op0 may be unary (CHECK: operand0, generation)
_RAND2_BOUND = Param(Kind.NUMBER, first_generation=4)  # rand2(dst, min, max) issues RNG with bounds
_ENGINE_NAMES = tuple(e.value for e in Engine) + ("unknown", "gpsimd_dma")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute", "all_gather_v",
               "all_to_all_v")
"""What one COLLECTIVE instruction does (nki.collectives; permute covers the implicit ring ones)."""

SPECS: dict[Opcode, InstructionSpec] = {s.opcode: s for s in (
    _spec(Opcode.DMA_COPY, Engine.DMA, Engine.GPSIMD, inputs=("src", "srcs*"),
          reads=_ANY - _PSUM, writes=_ANY - _PSUM,
          params={"dge_mode": _DGE_MODE, "oob_mode": Param(Kind.CHOICE, choices=("error", "skip")),
                  "priority": Param(Kind.INT, optional=True),
                  "queue": Param(Kind.CHOICE, optional=True, choices=_ENGINE_NAMES),
                  "indirect": _FRONT_END, "indirect_dim": _FRONT_END, "scalar_step": _FRONT_END,
                  "reduce_op": Param(Kind.CHOICE, choices=("add",)),
                  "unique_indices": Param(Kind.BOOL, optional=True)}),
    _spec(Opcode.DMA_TRANSPOSE, Engine.DMA, inputs=("src",), reads=_ANY - _PSUM, writes=_SBUF,
          params={"axes": Param(Kind.INTS), "dge_mode": _DGE_MODE}),
    _spec(Opcode.TENSOR_COPY, *_COMPUTE, inputs=("src",)),
    _spec(Opcode.TENSOR_COPY_PREDICATED, _V, _G, inputs=("src", "predicate"),
          params={"reverse_pred": _BOOL}),
    _spec(Opcode.MEMSET, *_COMPUTE, inputs=(), params={"value": _NUMBER}),
    _spec(Opcode.IOTA, _G, inputs=(), params=_AFFINE),
    _spec(Opcode.MATMUL, _T, inputs=("stationary", "moving"), reads=_SBUF, writes=_PSUM,
          params={**_MATMUL, "is_transpose": _BOOL,
                  "perf_mode": Param(Kind.CHOICE, choices=("none", "double_row"))}),
    _spec(Opcode.MATMUL_MX, _T, inputs=("stationary", "moving", "stationary_scale", "moving_scale"),
          reads=_SBUF, writes=_PSUM, first_generation=4, params=_MATMUL),
    # "Tensor Engine nc_transpose must read the input tile from SBUF and write the transposed result
    # to PSUM. Vector Engine nc_transpose can read/write from/to either SBUF or PSUM."
    _spec(Opcode.TRANSPOSE, _T, _V, engine_reads={_T: _SBUF}, engine_writes={_T: _PSUM}),
    _spec(Opcode.ACTIVATION, _S, outputs=("dst", "reduce_res?"), params=_SCALAR_ENGINE_OPS),
    _spec(Opcode.ACTIVATION_REDUCE, _S, outputs=("dst", "reduce_res"),
          params={"op": Param(Kind.ACTIVATION), "bias": _SCALAR_OPT, "scale": _SCALAR, **_REDUCTION}),
    _spec(Opcode.TENSOR_TENSOR, _V, _G, inputs=("data1", "data2"), params={"op": _ALU}),
    _spec(Opcode.TENSOR_SCALAR, _V, _S, _G, params={**_TWO_OPS, "op0": _OP0, "operand0": _SCALAR_OPT}),
    _spec(Opcode.SCALAR_TENSOR_TENSOR, _V, _G,
          params={**_TWO_OPS, "op1": _ALU, "operand1": Param(Kind.TILE)}),
    _spec(Opcode.TENSOR_REDUCE, _V, _G,
          params={"op": _REDUCE, "axis": Param(Kind.INTS), "negate": _BOOL, "keepdims": _BOOL}),
    _spec(Opcode.TENSOR_SCALAR_REDUCE, _V, outputs=("dst", "reduce_res?"),
          params={"op0": _OP0, "operand0": _SCALAR_OPT, "reverse0": _BOOL, "reduce_res_negate": _BOOL,
                  **_LOADING_REDUCTION}),
    _spec(Opcode.TENSOR_TENSOR_SCAN, _V, inputs=("data0", "data1"),
          params={"initial": _SCALAR, "op0": _ALU, "op1": _ALU, "reverse0": _BOOL, "reverse1": _BOOL,
                  # tensor_scalar_cumulative: data0 pre_op pre_operand first
                  "pre_op": _ALU_OPT, "pre_operand": _SCALAR_OPT,
                  "pre_reverse": Param(Kind.BOOL, optional=True),
                  # tensor_scalar_cumulative's use of the Vector engine's accumulator registers
                  "reduce_cmd": Param(Kind.CHOICE, optional=True,
                                      choices=("reset_reduce", "reduce", "load_reduce"))}),
    _spec(Opcode.TENSOR_PARTITION_REDUCE, _G, params={"op": Param(Kind.PARTITION_REDUCE)}),
    _spec(Opcode.BN_STATS, _V),
    _spec(Opcode.BN_AGGR, _V),
    _spec(Opcode.RECIPROCAL, _V),
    _spec(Opcode.EXPONENTIAL, _V, outputs=("dst", "reduce_res?"), inputs=("src",), first_generation=4,
          params={"max_value": _SCALAR, **_LOADING_REDUCTION}),
    _spec(Opcode.AFFINE_SELECT, _G, inputs=("on_true_tile",),
          params={**_AFFINE, "on_false_value": _NUMBER, "cmp_op": _AFFINE_COMPARISON}),
    _spec(Opcode.RANGE_SELECT, _V, outputs=("dst", "reduce_res?"), inputs=("on_true_tile",),
          first_generation=3,
          params={"comp_op0": _COMPARISONS, "comp_op1": _COMPARISONS, "bound0": _SCALAR, "bound1": _SCALAR,
                  "range_start": _INT, "on_false_value": _NUMBER, **_REDUCTION, "reduce_op": _MAXIMUM_ONLY}),
    _spec(Opcode.SELECT_REDUCE, _V, outputs=("dst", "reduce_res?"), inputs=("predicate", "on_true"),
          params={"on_false": _SCALAR, "reverse_pred": _BOOL, **_REDUCTION, "reduce_op": _MAXIMUM_ONLY}),
    _spec(Opcode.MAX8, _V, inputs=("src",)),
    _spec(Opcode.FIND_INDEX8, _V, inputs=("data", "vals")),
    _spec(Opcode.MATCH_REPLACE8, _V, outputs=("dst", "dst_idx?"), inputs=("data", "vals"),
          params={"imm": _NUMBER}),
    _spec(Opcode.STREAM_SHUFFLE, _V, _S, inputs=("src",), params={"shuffle_mask": Param(Kind.INTS)}),
    _spec(Opcode.LOCAL_GATHER, _G, inputs=("src_buffer", "index"), reads=_SBUF, writes=_SBUF,
          params={"num_elem_per_idx": _INT, "num_valid_indices": _INT, "group_partitions": _FRONT_END}),
    _spec(Opcode.N_GATHER, _G, inputs=("data", "indices"), reads=_SBUF, writes=_SBUF),
    _spec(Opcode.SEQUENCE_BOUNDS, _G, inputs=("segment_ids",), reads=_SBUF, writes=_SBUF),
    _spec(Opcode.NONZERO_WITH_COUNT, _G, inputs=("src",), reads=_SBUF, writes=_SBUF, first_generation=3,
          params={"index_offset": _INT, "padding_val": _INT, "group_partitions": _FRONT_END}),
    _spec(Opcode.QUANTIZE_MX, _V, outputs=("dst", "dst_scale"), inputs=("src",), first_generation=4),
    _spec(Opcode.RNG, _V, _G, inputs=(), params={"low": _RAND2_BOUND, "high": _RAND2_BOUND}),
    _spec(Opcode.DROPOUT, _V, params={"prob": Param(Kind.SCALAR, low=0.0, high=1.0)}),
    _spec(Opcode.RAND_SET_STATE, _G, _V, outputs=(), inputs=("src_seeds",), first_generation=3),
    _spec(Opcode.RAND_GET_STATE, _G, _V, inputs=(), first_generation=3),
    _spec(Opcode.REGISTER_MOVE, Engine.SYNC, outputs=(), inputs=(),
          params={"register": _FRONT_END, "value": Param(Kind.OFFSET, **_INT32)}),
    _spec(Opcode.REGISTER_LOAD, Engine.SYNC, outputs=(), inputs=("src",), reads=_ANY - _PSUM,
          params={"register": _FRONT_END}),
    _spec(Opcode.REGISTER_STORE, Engine.SYNC, inputs=(), writes=_ANY - _PSUM,
          params={"register": _FRONT_END}),
    _spec(Opcode.SENDRECV, Engine.DMA, inputs=("src",), reads=_ANY - _PSUM, writes=_ANY - _PSUM,
          first_generation=3, params={"send_to_rank": _INT, "recv_from_rank": _INT, "pipe_id": _INT}),
    _spec(Opcode.CORE_BARRIER, _G, outputs=(), inputs=(), reads=_ANY, writes=_ANY, first_generation=3),
    # nki.collectives: the CC cores drive DMA rings; `received` holds what the group's ranks sent
    _spec(Opcode.COLLECTIVE, Engine.DMA, outputs=("dst", "dsts*"), inputs=("src", "srcs*"),
          reads=_ANY - _PSUM, writes=_ANY - _PSUM,
          params={"collective": Param(Kind.CHOICE, choices=COLLECTIVES),
                  "op": Param(Kind.REDUCE, optional=True), "collective_dim": Param(Kind.INT, optional=True),
                  "priority": Param(Kind.INT, optional=True, low=0, high=3, first_generation=4),
                  "group": _FRONT_END, "rank": _FRONT_END, "received": _FRONT_END, "peer": _FRONT_END,
                  "recv_displs": _FRONT_END}),
)}

# Groups by what the instruction does, for rules that treat a family alike.
DMA = frozenset({Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE, Opcode.SENDRECV})
MATMUL = frozenset({Opcode.MATMUL, Opcode.MATMUL_MX})
ELEMENTWISE = frozenset({
    Opcode.TENSOR_COPY, Opcode.TENSOR_COPY_PREDICATED, Opcode.ACTIVATION, Opcode.TENSOR_TENSOR,
    Opcode.TENSOR_SCALAR, Opcode.SCALAR_TENSOR_TENSOR, Opcode.RECIPROCAL, Opcode.EXPONENTIAL,
    Opcode.AFFINE_SELECT, Opcode.RANGE_SELECT, Opcode.SELECT_REDUCE, Opcode.DROPOUT,
})
REDUCTION = frozenset({
    Opcode.ACTIVATION_REDUCE, Opcode.TENSOR_REDUCE, Opcode.TENSOR_SCALAR_REDUCE,
    Opcode.TENSOR_PARTITION_REDUCE, Opcode.BN_STATS, Opcode.BN_AGGR, Opcode.MAX8,
})
REGISTER = frozenset({Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD, Opcode.REGISTER_STORE})
# Compute instructions whose source and destination must span the same partitions.
SAME_PARTITIONS = ELEMENTWISE | frozenset({
    Opcode.ACTIVATION_REDUCE, Opcode.TENSOR_REDUCE, Opcode.TENSOR_SCALAR_REDUCE,
    Opcode.TENSOR_TENSOR_SCAN, Opcode.BN_STATS, Opcode.BN_AGGR, Opcode.MAX8,
})
