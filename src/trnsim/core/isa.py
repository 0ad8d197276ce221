"""What the NeuronCore can do: the closed list of instructions trnsim knows.

`Opcode` names every instruction; `SPECS[opcode]` is its one `InstructionSpec` (the engines that
may run it, the NKI call that issues it, the memories its operands may live in, the first
generation that has it). Everything that interprets an instruction (execute, check, cost) keys a
table on `Opcode`, and a coverage test checks that each table has a rule for every member.
Named groups (`ELEMENTWISE`, `MATMUL`, `DMA`, ...) replace scattered `if` tests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


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


_ON_CHIP = frozenset({Memory.SBUF, Memory.PSUM})
_SBUF = frozenset({Memory.SBUF})
_PSUM = frozenset({Memory.PSUM})
_ANY = frozenset(Memory)
_COMPUTE = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


@dataclass(frozen=True, kw_only=True)
class InstructionSpec:
    """Static facts about one opcode.

    `engines[0]` is the engine used when the kernel does not choose one. `reads`/`writes` are the
    memories the data operands may live in. `first_generation` is the NeuronCore generation
    (2 = trn1/inf2, 3 = trn2, 4 = trn3) that introduced the instruction.
    """

    opcode: Opcode
    engines: tuple[Engine, ...]
    reads: frozenset[Memory] = _ON_CHIP
    writes: frozenset[Memory] = _ON_CHIP
    first_generation: int = 2

    @property
    def nki_name(self) -> str:
        return f"nisa.{self.opcode.value}"


def _spec(opcode: Opcode, *engines: Engine, **facts) -> InstructionSpec:
    return InstructionSpec(opcode=opcode, engines=engines, **facts)


_V, _S, _G, _T = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.TENSOR

SPECS: dict[Opcode, InstructionSpec] = {s.opcode: s for s in (
    _spec(Opcode.DMA_COPY, Engine.DMA, Engine.GPSIMD, reads=_ANY - _PSUM, writes=_ANY - _PSUM),
    _spec(Opcode.DMA_TRANSPOSE, Engine.DMA, reads=_ANY - _PSUM, writes=_SBUF),
    _spec(Opcode.TENSOR_COPY, *_COMPUTE),
    _spec(Opcode.TENSOR_COPY_PREDICATED, _V, _G),
    _spec(Opcode.MEMSET, *_COMPUTE),
    _spec(Opcode.IOTA, _G),
    _spec(Opcode.MATMUL, _T, reads=_SBUF, writes=_PSUM),
    _spec(Opcode.MATMUL_MX, _T, reads=_SBUF, writes=_PSUM, first_generation=4),
    _spec(Opcode.TRANSPOSE, _T, _V),
    _spec(Opcode.ACTIVATION, _S),
    _spec(Opcode.ACTIVATION_REDUCE, _S),
    _spec(Opcode.TENSOR_TENSOR, _V, _G),
    _spec(Opcode.TENSOR_SCALAR, _V, _S, _G),
    _spec(Opcode.SCALAR_TENSOR_TENSOR, _V, _G),
    _spec(Opcode.TENSOR_REDUCE, _V, _G),
    _spec(Opcode.TENSOR_SCALAR_REDUCE, _V),
    _spec(Opcode.TENSOR_TENSOR_SCAN, _V),
    _spec(Opcode.TENSOR_PARTITION_REDUCE, _G),
    _spec(Opcode.BN_STATS, _V),
    _spec(Opcode.BN_AGGR, _V),
    _spec(Opcode.RECIPROCAL, _V),
    _spec(Opcode.EXPONENTIAL, _V, first_generation=4),
    _spec(Opcode.AFFINE_SELECT, _G),
    _spec(Opcode.RANGE_SELECT, _V),
    _spec(Opcode.SELECT_REDUCE, _V),
    _spec(Opcode.MAX8, _V),
    _spec(Opcode.FIND_INDEX8, _V),
    _spec(Opcode.MATCH_REPLACE8, _V),
    _spec(Opcode.STREAM_SHUFFLE, _V, _S),
    _spec(Opcode.LOCAL_GATHER, _G, reads=_SBUF, writes=_SBUF),
    _spec(Opcode.N_GATHER, _G, reads=_SBUF, writes=_SBUF),
    _spec(Opcode.SEQUENCE_BOUNDS, _G, reads=_SBUF, writes=_SBUF),
    _spec(Opcode.NONZERO_WITH_COUNT, _G, reads=_SBUF, writes=_SBUF, first_generation=3),
    _spec(Opcode.QUANTIZE_MX, _V, first_generation=4),
    _spec(Opcode.RNG, _V, _G),
    _spec(Opcode.DROPOUT, _V),
    _spec(Opcode.RAND_SET_STATE, _G, _V, first_generation=3),
    _spec(Opcode.RAND_GET_STATE, _G, _V, first_generation=3),
    _spec(Opcode.REGISTER_MOVE, Engine.SYNC),
    _spec(Opcode.REGISTER_LOAD, Engine.SYNC, reads=_ANY - _PSUM),
    _spec(Opcode.REGISTER_STORE, Engine.SYNC, writes=_ANY - _PSUM),
    _spec(Opcode.SENDRECV, Engine.DMA, reads=_ANY - _PSUM, writes=_ANY - _PSUM, first_generation=3),
    _spec(Opcode.CORE_BARRIER, _G, reads=_ANY, writes=_ANY, first_generation=3),
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
