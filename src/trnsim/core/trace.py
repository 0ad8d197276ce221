"""The trace: what a kernel asked the NeuronCore to do, in program order, with no values.

One `Instruction` per ISA operation a kernel issued. It holds everything a timing model needs:
the opcode and the engine that ran it, each operand as a `Region` (which memory and allocation,
which partitions, the free-dim access pattern in elements, the dtype and its size in bytes, so
bytes moved and overlaps between instructions can be computed), the instruction's parameters
(accumulate flag, perf_mode, activation function, ALU ops, DMA queue, ...) and `where`, the
kernel's file and line. A `Trace` is a list of them plus the target it was recorded for.
Execution and timing meet only here (ARCHITECTURE.md rule 2).

Region conventions:
* on-chip (SBUF/PSUM): `partition_start`/`partition_count` are absolute partitions (0..127);
  `address_bytes` is the allocation's byte address inside every partition; `offset` is the
  element offset of the first element from that address; `pattern` lists the free dims as
  `(stride, count)` pairs in elements, outermost first.
* HBM: `partition_start` = 0 and `partition_count` = 1; `pattern` covers every dim of the view
  and `offset` is the element offset inside the tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from trnsim.core.isa import Engine, Memory, Opcode
from trnsim.errors import SourceLoc


class Region(NamedTuple):
    """A rectangle of memory one operand touches: partitions x a free-dim access pattern.

    A NamedTuple rather than a frozen dataclass: one is built per operand of every instruction,
    and a tuple is built about 4x faster."""

    buffer: int
    name: str
    memory: Memory  # from here on: the layout (`region[2:]`), what the timing model keys on
    address_bytes: int
    partition_start: int
    partition_count: int
    pattern: tuple[tuple[int, int], ...]
    offset: int
    dtype: str
    dtype_bytes: float

    @property
    def elements_per_partition(self) -> int:
        elements = 1
        for _, count in self.pattern:  # a plain loop: patterns have a dim or two, and this runs per check
            elements *= count
        return elements

    @property
    def elements(self) -> int:
        return self.partition_count * self.elements_per_partition

    @property
    def bytes(self) -> int:
        return int(self.elements * self.dtype_bytes)

    @property
    def partitions(self) -> range:
        return range(self.partition_start, self.partition_start + self.partition_count)

    def byte_span(self) -> tuple[int, int]:
        """[first, last] byte touched inside a partition (or in the HBM tensor): for overlap tests."""
        low = high = self.offset
        for stride, count in self.pattern:
            reach = stride * (count - 1)
            if reach < 0:
                low += reach
            else:
                high += reach
        start = self.address_bytes + int(low * self.dtype_bytes)
        return start, self.address_bytes + int((high + 1) * self.dtype_bytes) - 1


@dataclass(frozen=True, slots=True)
class InputRef:
    """A parameter whose value is a tensor: it points at `Instruction.inputs[index]`."""

    index: int


@dataclass(frozen=True, slots=True)
class Instruction:
    """One executed ISA operation: who ran it, on which memory, with which settings, from where.

    `params` is read-only; a parameter that is a tensor (a [P,1] scalar operand, a bias, an
    index tile) is an `InputRef` into `inputs`. `core` is the logical core (program id) that
    issued it under LNC=2 or an SPMD grid.
    """

    opcode: Opcode
    engine: Engine
    outputs: tuple[Region, ...]
    inputs: tuple[Region, ...]
    params: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    where: SourceLoc | None = None
    name: str = ""
    core: int = 0

    def param(self, key: str, default: object = None) -> object:
        return self.params.get(key, default)

    def __str__(self) -> str:
        regions = ", ".join(f"{r.memory.value}:{r.name}" for r in self.outputs + self.inputs)
        return f"{self.opcode.value}[{self.engine.value}]({regions}) at {self.where}"


def freeze_params(params: Mapping[str, object]) -> Mapping[str, object]:
    """A read-only copy of an instruction's parameters."""
    return MappingProxyType(dict(params))


NKI_COMPILER = "nki"
"""The NKI compiler (NKI 0.6): it keeps the kernel's instructions as written ("preserving the
developer's optimization choices", aws-neuron-sdk nki/deep-dives/nki-compiler.rst)."""
NEURONX_CC = "neuronx-cc"
"""The compiler of old-API kernels (`neuronxcc.nki`, NKI Beta 1), which optimises their loops."""


class Trace(list):
    """The instructions of one kernel run, in program order, for one target (e.g. "trn2").

    `compiler` is the compiler that would build the kernel (`NKI_COMPILER` or `NEURONX_CC`): the
    timing model follows what each does with the instructions. `cores` is how many physical
    cores the launch ran on (2 for a logical core of LNC=2): utilization is against their peak."""

    def __init__(self, target: str, instructions: Iterable[Instruction] = (), compiler: str = NKI_COMPILER,
                 cores: int = 1):
        super().__init__(instructions)
        self.target = target
        self.compiler = compiler
        self.cores = cores

    def by_engine(self) -> dict[Engine, list[Instruction]]:
        groups: dict[Engine, list[Instruction]] = {}
        for instruction in self:
            groups.setdefault(instruction.engine, []).append(instruction)
        return groups

    def counts(self) -> dict[Opcode, int]:
        """How many instructions of each opcode the kernel issued."""
        totals: dict[Opcode, int] = {}
        for instruction in self:
            totals[instruction.opcode] = totals.get(instruction.opcode, 0) + 1
        return totals

    def __repr__(self) -> str:
        return f"Trace(target={self.target!r}, {len(self)} instructions)"
