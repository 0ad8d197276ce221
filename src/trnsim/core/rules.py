"""A rule table keyed by `Opcode`: the one registration pattern every interpretation uses.

    EXECUTE = RuleTable("EXECUTE")

    @EXECUTE.register(Opcode.MEMSET)
    def _memset(ins, io): ...

A second rule for an opcode, or a key that is not an `Opcode`, is refused at import time.
`missing()` lists the opcodes without a rule, for the coverage tests.
"""

from __future__ import annotations

from collections.abc import Callable

from trnsim.core.isa import Opcode


class RuleTable(dict):
    """Opcode -> rule. Filled at import by the `register` decorator, never lazily."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def register(self, *opcodes: Opcode) -> Callable:
        for opcode in opcodes:
            if not isinstance(opcode, Opcode):
                raise TypeError(f"{self.name}: {opcode!r} is not an Opcode")

        def decorate(rule: Callable) -> Callable:
            for opcode in opcodes:
                if opcode in self:
                    raise ValueError(f"{self.name}: a second rule for {opcode} ({rule.__name__}); "
                                     f"the first is {self[opcode].__name__}")
                self[opcode] = rule
            return rule
        return decorate

    def missing(self) -> list[Opcode]:
        return [opcode for opcode in Opcode if opcode not in self]
