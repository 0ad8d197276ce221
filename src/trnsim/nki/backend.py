"""The active back end: which NeuronCore the running kernel issues instructions to.

It lives in a `contextvars` variable (each LNC thread sets its own), never a module global.
`new_tensor` is how nl/nisa create tensors; `issue` is how they record instructions.
"""

from __future__ import annotations

import contextvars

import numpy as np

from trnsim.core.isa import ELEMENTWISE, SPECS, Engine, Memory, Opcode
from trnsim.core.machine import NeuronCore, kernel_line
from trnsim.core.memory import GatherView, contiguous_strides
from trnsim.core.trace import InputRef
from trnsim.errors import ArgumentError, KernelError, SourceLoc, UnsupportedError
from trnsim.nki import dtypes
from trnsim.nki.calls import describe
from trnsim.nki.tensor import IndirectColumns, IndirectTensor, NkiTensor

_active: contextvars.ContextVar[NeuronCore | None] = contextvars.ContextVar("trnsim_nki_core", default=None)


def core() -> NeuronCore:
    """The core running the current kernel; nl/nisa calls outside a kernel are an error."""
    running = _active.get()
    if running is None:
        raise KernelError("nki calls must run inside a kernel launched with trnsim.nki.simulate/jit/trace",
                          hint="call the kernel through nki.jit or nki.simulate")
    return running


def in_kernel() -> bool:
    """Whether a kernel is running on this thread (a kernel called from one is inlined)."""
    return _active.get() is not None


def activate(running: NeuronCore | None) -> contextvars.Token:
    return _active.set(running)


def deactivate(token: contextvars.Token) -> None:
    _active.reset(token)


def new_tensor(shape, dtype, buffer=dtypes.SBUF, name: str = "", address=None,
               values: np.ndarray | None = None, kernel_made: bool = True) -> NkiTensor:
    """Allocate a tensor in `buffer` (a memory region); on-chip ones take SBUF/PSUM space."""
    running = core()
    shape = tuple([int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,))])
    element = dtypes.dtype(dtype)
    place = dtypes.region(buffer)
    if not name:  # unnamed tiles are called after the line that made them, e.g. "softmax:14"
        made_at = kernel_line()
        name = f"{made_at.function}:{made_at.line}" if made_at else place.name
    if place is dtypes.SHARED_HBM and kernel_made:
        storage = _shared(running, shape, element, name, values)
    else:
        storage = running.memory.allocate(place.memory, shape, element, name, address, values, place.name)
    if place.memory is Memory.HBM and kernel_made:
        running.launch.created.setdefault(storage.id, SourceLoc.of_caller())
    return NkiTensor(storage, shape, contiguous_strides(shape), 0)


def _shared(running: NeuronCore, shape, element, name, values):
    """The k-th shared-HBM tensor of every program of a launch is one tensor (SPMD outputs), so
    every program must ask for it with the same shape and dtype. The error names the two requests
    in program order, whichever program (thread, under LNC=2) asked first."""
    index = running.shared_made
    running.shared_made += 1
    launch = running.launch
    with launch.lock:
        if index not in launch.shared:
            storage = running.memory.allocate(Memory.HBM, shape, element, name, None, values,
                                              dtypes.SHARED_HBM.name)
            launch.shared[index] = (storage, running.program_id)
        storage, maker = launch.shared[index]
    if (storage.shape, storage.dtype) != (shape, element):
        asks = sorted([(maker, f"{storage.dtype.name}{list(storage.shape)}"),
                       (running.program_id, f"{element.name}{list(shape)}")])
        raise KernelError(f"shared_hbm tensor {index + 1} is one tensor of every program, but program "
                          f"{asks[0][0]} asks for {asks[0][1]} and program {asks[1][0]} for {asks[1][1]}",
                          op="nl.ndarray", hint="give every program's shared_hbm tensors the same shapes "
                                                "and dtypes, in the same order")
    return storage


def issue(opcode: Opcode, dst, srcs=(), params=None, engine=None, name: str = ""):
    """Record one instruction with output views `dst` and input views `srcs`."""
    running = core()
    chosen = _engine(engine, opcode)
    outputs, inputs = (dst if isinstance(dst, tuple) else (dst,)), tuple(srcs)
    if not _PLAIN_VIEWS.issuperset(map(type, outputs + inputs)):  # a None, an indirect view, a mistake
        spec = SPECS[opcode]
        outputs = _operands(outputs, "output", spec, chosen, running)
        inputs = _operands(inputs, "input", spec, chosen, running, params)
    check_own_tiles(running, outputs + inputs, SPECS[opcode].nki_name)
    return running.issue(opcode, outputs, inputs, params or {}, chosen, name or "")


def check_own_tiles(running: NeuronCore, views, op: str) -> None:
    """Each NeuronCore has its own SBUF and PSUM, and each program of a grid its own tiles: a tile
    another program made, handed over in a Python object, is refused. (A tile of a launch that has
    ended is refused by its view, with its own message.)"""
    mine = running.memory.launch
    for view in views:
        made_by = view.storage.launch
        if made_by is not mine and not made_by.over and view.storage.memory is not Memory.HBM:
            raise KernelError(f"tile {view.name!r} was made by another program of this launch; this is "
                              f"program {running.program_id}, and a program's SBUF and PSUM tiles are its "
                              f"own", op=op, hint="move data between programs through shared_hbm tensors "
                                                  "(or nisa.sendrecv between the two cores of LNC=2)")


_PLAIN_VIEWS = frozenset({NkiTensor, IndirectTensor})
"""Operand types `issue` passes on as they are (the test runs in C, once per instruction)."""


def _operands(views, role: str, spec, engine: Engine | None, running: NeuronCore, params=None) -> tuple:
    """The views that are given, with `NkiTensor.indirect` ones bound to the engine (`_bind`);
    None where the contract makes the operand optional; anything else is refused by name."""
    kept = []
    for index, view in enumerate(views):
        if isinstance(view, IndirectColumns):
            kept.append(_bind(view, spec.opcode, engine, running))
        elif isinstance(view, NkiTensor | IndirectTensor):
            kept.append(view)
        elif view is not None or not _optional(spec, role, index):
            operand = _operand_name(spec, role, index, params)
            raise ArgumentError(f"{operand} is {describe(view)}; it must be a tile (an nl.ndarray or a "
                                f"view of one)", op=spec.nki_name)
    return tuple(kept)


def _optional(spec, role: str, index: int) -> bool:
    names = spec.outputs if role == "output" else spec.inputs
    return index < len(names) and names[index].endswith("?")


def _operand_name(spec, role: str, index: int, params) -> str:
    """The argument's NKI name: from the contract, or the parameter a tile operand was given for."""
    for key, value in (params or {}).items():
        if role == "input" and isinstance(value, InputRef) and value.index == index:
            return key
    return spec.operand_name(role, index)


_INDIRECTION_OPCODES = ELEMENTWISE | frozenset({
    Opcode.TENSOR_REDUCE, Opcode.TENSOR_SCALAR_REDUCE, Opcode.ACTIVATION_REDUCE, Opcode.TENSOR_TENSOR_SCAN,
    Opcode.MEMSET, Opcode.IOTA})
"""Instructions whose execution reads and writes operands only through `Operands` (GatherView-safe)."""


def _bind(view: IndirectColumns, opcode: Opcode, engine: Engine | None, running: NeuronCore) -> GatherView:
    """A `NkiTensor.indirect` operand becomes a GatherView with the running engine's offsets."""
    spec, engine = running.spec, engine or SPECS[opcode].engines[0]
    chosen = spec.engines.get(engine.value) if spec.engines else None
    group = chosen.indirection_group_partitions if chosen is not None else None
    if group is None:
        raise UnsupportedError(f"NkiTensor.indirect operands on the {engine.value} engine need tensor "
                               f"indirection, which {spec.name} does not have (NeuronCore-v4 / trn3 does)",
                               what="NkiTensor.indirect", target=spec.name)
    if opcode not in _INDIRECTION_OPCODES:
        raise UnsupportedError(f"NkiTensor.indirect operands of nisa.{opcode.value} are not emulated",
                               what="NkiTensor.indirect", hint="see docs/nki.md")
    columns = view.columns(group, running.with_values)
    return GatherView(view.storage, view.shape, view.strides[0], view.offset, view.element, columns,
                      view.reach)


_ENGINES = {engine.value: engine for engine in Engine}


def _engine(engine, opcode: Opcode) -> Engine | None:
    """The engine a kernel chose (`nisa.engine.vector`, "vector"), or None to let the spec choose."""
    value = getattr(engine, "value", engine)
    if value is None or (isinstance(value, str) and value == "unknown"):
        return None
    try:
        return _ENGINES[value]
    except (KeyError, TypeError):
        raise ArgumentError(f"engine={engine!r}; it must be one of {sorted(_ENGINES)} (nisa.engine.*)",
                            op=SPECS[opcode].nki_name) from None
