"""One NeuronCore running a kernel: memory, engine state, and the trace it appends to.

`NeuronCore.issue(...)` is the single path every instruction takes: build the `Instruction`
(with the kernel's file and line), check it, execute it when values are kept (`simulate`; through
the deferred queue of core/deferred.py unless `eager`), append it to the trace. With
`with_values=False` (`trace_only`) nothing is computed and a kernel that tries to read a value
gets a clear error.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from dataclasses import dataclass, field
from types import CodeType

import numpy as np

from trnsim.core import placement
from trnsim.core.check import check
from trnsim.core.deferred import DeferredQueue
from trnsim.core.execute import run as run_instruction
from trnsim.core.isa import SPECS, Engine, Memory, Opcode
from trnsim.core.memory import Allocator, HbmBudget, MemorySystem, View
from trnsim.core.runtime import current as current_runtime
from trnsim.core.trace import NKI_COMPILER, Instruction, Trace, freeze_params
from trnsim.errors import KernelError, SourceLoc, TrnsimError, UnsupportedError

_TRNSIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_file(filename: str, kernel_files: set[str]) -> str | None:
    """The absolute path of a file that is the user's code or holds kernels, or None for the rest
    of trnsim and import machinery."""
    path = os.path.abspath(filename)
    if path in kernel_files:
        return path
    if path.startswith(_TRNSIM_DIR) or "<frozen " in path or path.endswith(os.sep + "contextlib.py"):
        return None
    return path


def kernel_line() -> SourceLoc | None:
    """Like SourceLoc.of_caller (first frame outside trnsim), from the caller's caller on (the
    caller is trnsim, which owns this helper). It runs once per instruction, so it caches whether
    each code object is the user's and each code position's SourceLoc (`Runtime.kernel_lines`):
    `f_lineno` decodes the line table from its start, which for a long kernel costs more than the
    rest of an issue."""
    runtime = current_runtime()
    lines = runtime.kernel_lines
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        _, path, at_offset = lines.get(id(code)) or _remember(lines, code, runtime.kernel_files)
        if path is not None:
            where = at_offset.get(frame.f_lasti)
            if where is None:
                where = at_offset[frame.f_lasti] = SourceLoc(path, frame.f_lineno, code.co_name)
            return where
        frame = frame.f_back
    return None


def _remember(lines: dict, code: CodeType, kernel_files: set[str]) -> tuple:
    """The kernel-lines entry of `code`: (code, its file if it is the user's, {offset: SourceLoc})."""
    if len(lines) >= 4096:  # a bound on the code objects kept alive
        lines.clear()
    entry = lines[id(code)] = (code, _user_file(code.co_filename, kernel_files), {})
    return entry


@dataclass
class EngineState:
    """State the engines keep between instructions: accumulator registers, RNG, scalar registers."""

    partitions: int
    seed: int = 0
    accumulators: dict = field(default_factory=dict)
    registers: dict = field(default_factory=dict)
    rng_words: dict = field(default_factory=dict)  # engine -> [partitions, words] PRNG state words
    rng_snapshot: tuple | None = None  # (engine, generator state) when those words seeded the generator
    _rng: np.random.Generator | None = field(default=None, init=False, repr=False)

    @property
    def rng(self) -> np.random.Generator:
        """The engines' random generator, made on first use: a trace-only run never draws, and the
        first generator of a process imports numpy.random (20 ms)."""
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return self._rng

    @rng.setter
    def rng(self, generator: np.random.Generator) -> None:
        self._rng = generator


class Launch:
    """What the cores of one kernel launch share: the trace, buffer ids, a lock, mailboxes (for
    sendrecv and barriers between the cores of LNC=2), HBM."""

    def __init__(self, target: str, cores: int, compiler: str = NKI_COMPILER):
        self.trace = Trace(target, compiler=compiler, cores=cores)
        self.ids = itertools.count()
        self.lock = threading.Lock()
        self.cores = cores  # cores running side by side as threads (2 under LNC=2)
        self.mailboxes: dict = {}
        self.created: dict = {}  # HBM buffer id -> where the kernel created it (for error messages)
        self.shared: dict = {}  # k-th shared-HBM tensor a program creates -> the one buffer all share
        self.written: dict = {}  # PSUM buffer -> which elements issued instructions wrote (old API's +=)
        self.hbm = HbmBudget.of_target(target, cores)


class NeuronCore:
    """A core of the target generation executing one program of a launch."""

    def __init__(self, spec, launch: Launch, *, with_values: bool, strict: bool, program_id: int = 0,
                 grid: tuple[int, ...] = (), seed: int = 0, eager: bool = False):
        self.spec = spec
        self.launch = launch
        self.with_values = with_values
        self.strict = strict
        self.program_id = program_id
        self.grid = grid  # SPMD launch grid (() without one); program_id is the flat index into it
        self.shared_made = 0  # shared-HBM tensors this program has created so far
        sbuf = Allocator(Memory.SBUF, spec.sbuf_bytes_per_partition, spec.partitions)
        psum = Allocator(Memory.PSUM, spec.psum_bytes_per_partition, spec.partitions, spec.psum_bank_bytes)
        self._state = EngineState(spec.partitions, seed + program_id)
        # Strict mode reports uninitialised reads at the instruction itself, so it never defers.
        self.queue = DeferredQueue(self._state) if with_values and not (eager or strict) else None
        self.memory = MemorySystem(sbuf, psum, with_values, strict, launch.ids, self.queue, launch.hbm)

    @property
    def state(self) -> EngineState:
        """Registers, RNG and accumulators as the front end may read them: after queued work ran."""
        self.flush()
        return self._state

    def flush(self) -> None:
        """Execute every deferred instruction."""
        if self.queue:
            self.queue.flush()

    def settle(self) -> None:
        """Once the launch is over: place this core's tiles over their lifetimes in the trace, as
        the compiler would (core/placement.py), and check tiles the kernel placed over each other."""
        for allocator in self.memory.allocators.values():
            placement.settle(self.launch.trace, self.program_id, allocator, self.strict)

    @property
    def trace(self) -> Trace:
        return self.launch.trace

    def issue(self, opcode: Opcode, outputs: tuple[View, ...], inputs: tuple[View, ...], params: dict,
              engine: Engine | None = None, name: str = "", execute: bool = True) -> Instruction:
        """Check, execute (when keeping values and `execute`) and record one instruction.

        `execute=False` is for instructions whose values the front end moves itself (sendrecv).
        """
        spec = SPECS[opcode]
        where = kernel_line()
        if self.spec.generation < spec.first_generation:
            raise UnsupportedError(f"needs NeuronCore generation {spec.first_generation} or later; "
                                   f"{self.spec.name} is generation {self.spec.generation}",
                                   what=spec.nki_name, target=self.spec.name, where=where, op=spec.nki_name,
                                   hint="choose a newer target (e.g. trn3)")
        engine = engine or spec.engines[0]
        if engine not in spec.engines:
            raise KernelError(f"engine {engine.value} cannot run this instruction; it runs on "
                              f"{[e.value for e in spec.engines]}", where=where, op=spec.nki_name)
        ins = Instruction(opcode, engine, tuple([v.region() for v in outputs]),
                          tuple([v.region() for v in inputs]), freeze_params(params), where, name,
                          self.program_id)
        try:
            check(ins, self.spec)
        except TrnsimError:
            self.flush()  # an earlier instruction's execution error comes first, as without deferral
            raise
        if self.with_values and not execute:
            self.flush()  # the front end moves this one's values itself
        elif self.with_values and self.queue is not None:
            self.queue.add(ins, inputs, outputs)
        elif self.with_values:
            run_instruction(ins, inputs, outputs, self._state, self.strict)
        self.launch.trace.append(ins)
        return ins
