"""The ISA is closed: every opcode has a spec and an EXECUTE rule; rule tables refuse mistakes."""

import pytest

from trnsim.core.execute import EXECUTE
from trnsim.core.isa import SPECS, Engine, Opcode
from trnsim.core.rules import RuleTable


def test_every_opcode_has_a_spec_and_an_execute_rule():
    assert set(SPECS) == set(Opcode)
    assert EXECUTE.missing() == []


def test_specs_name_engines_and_a_generation():
    for spec in SPECS.values():
        assert spec.engines and all(isinstance(e, Engine) for e in spec.engines)
        assert spec.first_generation in (2, 3, 4)
        assert spec.nki_name == f"nisa.{spec.opcode.value}"


def test_rule_table_rejects_second_rule_and_non_opcodes():
    table = RuleTable("T")

    @table.register(Opcode.MEMSET)
    def first(ins, io):
        return None

    with pytest.raises(ValueError, match="second rule"):
        table.register(Opcode.MEMSET)(lambda ins, io: None)
    with pytest.raises(TypeError, match="not an Opcode"):
        table.register("memset")
    assert table[Opcode.MEMSET] is first
    assert Opcode.IOTA in table.missing()
