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
from trnsim.errors import KernelError, SourceLoc, UnsupportedError
from trnsim.nki import dtypes
from trnsim.nki.tensor import IndirectColumns, IndirectTensor, NkiTensor

_active: contextvars.ContextVar[NeuronCore | None] = contextvars.ContextVar("trnsim_nki_core", default=None)


def core() -> NeuronCore:
    """The core running the current kernel; nl/nisa calls outside a kernel are an error."""
    running = _active.get()
    if running is None:
        raise KernelError("nki calls must run inside a kernel launched with trnsim.nki.simulate/jit/trace",
                          hint="call the kernel through nki.jit or nki.simulate")
    return running


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
    """The k-th shared-HBM tensor of every program of a launch is one tensor (SPMD outputs)."""
    index = running.shared_made
    running.shared_made += 1
    launch = running.launch
    with launch.lock:
        if index not in launch.shared:
            launch.shared[index] = running.memory.allocate(Memory.HBM, shape, element, name, None, values,
                                                           dtypes.SHARED_HBM.name)
        return launch.shared[index]


def issue(opcode: Opcode, dst, srcs=(), params=None, engine=None, name: str = ""):
    """Record one instruction with output views `dst` and input views `srcs`."""
    running = core()
    chosen = _engine(engine)
    outputs, inputs = (dst if isinstance(dst, tuple) else (dst,)), tuple(srcs)
    if not _PLAIN_VIEWS.issuperset(map(type, outputs + inputs)):  # a None or an indirect view
        outputs = _operands(outputs, opcode, chosen, running)
        inputs = _operands(inputs, opcode, chosen, running)
    return running.issue(opcode, outputs, inputs, params or {}, chosen, name or "")


_PLAIN_VIEWS = frozenset({NkiTensor, IndirectTensor})
"""Operand types `issue` passes on as they are (the test runs in C, once per instruction)."""


def _operands(views, opcode: Opcode, engine: Engine | None, running: NeuronCore) -> tuple:
    """The views that are not None, with `NkiTensor.indirect` ones bound to the engine (`_bind`)."""
    return tuple([_bind(v, opcode, engine, running) if isinstance(v, IndirectColumns) else v
                  for v in views if v is not None])


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


def _engine(engine) -> Engine | None:
    if engine is None or engine == "unknown" or getattr(engine, "value", None) == "unknown":
        return None
    value = getattr(engine, "value", engine)
    try:
        return _ENGINES[value]
    except (KeyError, TypeError):
        return Engine(value)  # raises the enum's own error for a name that is no engine
