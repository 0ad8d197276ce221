"""Scalar registers (`VirtualRegister`) for runtime loop counters and dynamic offsets.

Under `simulate` a register's value is known and can steer Python control flow; under
`trace_only` it is not, and reading it raises a clear error that says to use `simulate`.
"""

from __future__ import annotations

from trnsim.core.isa import Opcode, RegisterRef
from trnsim.errors import ArgumentError, KernelError
from trnsim.nki import backend, calls


class VirtualRegister:
    """A 32-bit scalar register of the running core."""

    __slots__ = ("id",)

    def __init__(self, value: int | None = None):
        self.id = next(backend.core().launch.ids)
        if value is not None:
            register_move(self, value)

    def read_value(self) -> int:
        running = backend.core()
        if not running.with_values:
            raise KernelError("the kernel reads a register value to decide what to do; trace_only runs "
                              "have no values", hint="use trnsim.nki.simulate for this kernel")
        return int(running.state.registers.get(self.id, 0))

    def __int__(self) -> int:
        return self.read_value()

    __index__ = __int__

    def __bool__(self) -> bool:
        """`while reg:` loops run while the register is non-zero (simulate only)."""
        return self.read_value() != 0

    def __repr__(self) -> str:
        return f"VirtualRegister(r{self.id})"


def register_alloc(x=None) -> VirtualRegister:
    return VirtualRegister(x)


def register_move(dst: VirtualRegister, src, name=None) -> VirtualRegister:
    """dst = src, an integer or another register (read when the move runs, so trace_only records it
    as simulate does). NKI 0.3.0 renamed imm= to src=."""
    value = RegisterRef(src.id) if isinstance(src, VirtualRegister) else src
    backend.issue(Opcode.REGISTER_MOVE, (), (), {"register": _register(dst, "dst").id, "value": value},
                  None, name)
    return dst


def register_load(dst: VirtualRegister, src, name=None) -> VirtualRegister:
    backend.issue(Opcode.REGISTER_LOAD, (), (src,), {"register": _register(dst, "dst").id}, None, name)
    return dst


def register_store(dst, src: VirtualRegister, name=None):
    backend.issue(Opcode.REGISTER_STORE, dst, (), {"register": _register(src, "src").id}, None, name)
    return dst


def _register(value, argument: str) -> VirtualRegister:
    if not isinstance(value, VirtualRegister):
        raise ArgumentError(f"{argument} is {calls.describe(value)}; it must be a VirtualRegister "
                            f"(nisa.register_alloc)")
    return value


calls.checked_calls(globals(), "nisa")  # dst or src is a register; backend.issue checks the tiles
