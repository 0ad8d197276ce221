"""The contract covers the whole front end: every public nl/nisa function declares its parameters
(no ** catch-all swallows a misspelled or old-API keyword), every documented NKI 0.6 parameter is
accepted, and every opcode declares its operands and parameters."""

import inspect
import pathlib
import re

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core.isa import SPECS, Opcode
from trnsim.errors import ArgumentError, TrnsimError

REFERENCE = pathlib.Path(__file__).resolve().parents[3] / "shared" / "reference" / "nki.md"


def _public_functions(module, prefix):
    return sorted((f"{prefix}.{name}", value) for name, value in vars(module).items()
                  if not name.startswith("_") and inspect.isfunction(value)
                  and value.__module__.startswith("trnsim.nki"))


FUNCTIONS = _public_functions(nisa, "nisa") + _public_functions(nl, "nl")


@pytest.mark.parametrize("name,function", FUNCTIONS, ids=[name for name, _ in FUNCTIONS])
def test_every_parameter_is_declared_and_a_stray_keyword_names_itself(name, function):
    kinds = [p.kind for p in inspect.signature(function).parameters.values()]
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name} swallows unknown keywords"
    assert getattr(function, "checked_call", None) == name, f"{name} is not a checked call"

    def kernel(a):
        function(acumulate=True)

    with pytest.raises(ArgumentError, match=rf"^test_contract_coverage\.py:\d+ in kernel: {re.escape(name)}: "
                                            r"got an unexpected keyword argument 'acumulate'; it takes"):
        nki.simulate(kernel)(np.zeros((2, 2), np.float32))


def test_the_old_api_mask_keyword_says_which_api_it_belongs_to():
    def kernel(a):
        tile = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a, mask=None)

    with pytest.raises(ArgumentError, match="'mask'.*old neuronxcc.nki API"):
        nki.simulate(kernel)(np.zeros((2, 2), np.float32))


def _documented_signatures() -> dict[str, list[str]]:
    """nisa signatures from the NKI reference's tables: `name(dst, src, priority=None, ...)`."""
    text = REFERENCE.read_text().split("### 2.3 `nki.isa` (nisa)", 1)[1].split("### 2.4", 1)[0]
    signatures = {}
    for name, arguments in re.findall(r"^\| `(\w+)\(([^`]*)\)`", text, flags=re.MULTILINE):
        names = [a.split("=")[0].strip() for a in arguments.split(",")]
        # "reverse0/1" in the table stands for reverse0 and reverse1
        signatures[name] = [n for part in names for n in
                            ((part, part[:-3] + "1") if part.endswith("0/1") else (part,)) if n]
    return signatures


@pytest.mark.skipif(not REFERENCE.exists(), reason="needs ../shared/reference/nki.md beside the checkout")
def test_every_documented_nisa_parameter_is_accepted():
    documented = _documented_signatures()
    assert len(documented) > 40
    missing = {}
    for name, parameters in documented.items():
        accepted = inspect.signature(getattr(nisa, name)).parameters
        absent = [p.replace("0/1", "0") for p in parameters if p.replace("0/1", "0") not in accepted]
        if absent:
            missing[name] = absent
    assert missing == {}


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda o: o.value)
def test_every_opcode_names_its_operands_and_declares_its_parameters(opcode):
    spec = SPECS[opcode]
    assert spec.opcode is opcode and spec.engines
    for name in spec.outputs + spec.inputs:
        assert re.fullmatch(r"[a-z_0-9]+[?*]?", name), name
    for key, param in spec.params.items():
        assert param.first_generation >= 2 and (not param.choices or param.kind.name == "CHOICE"), key


JUNK = (None, "x", -1, 2.5, np.ones((4, 4), np.float32))
"""Values a careless call may pass for any argument."""
NO_KERNEL_BODY = {"nl.fori_loop", "nl.while_loop", "nl.device_print", "nisa.sendrecv", "nisa.core_barrier"}


@pytest.mark.parametrize("name,function", [(n, f) for n, f in FUNCTIONS if n not in NO_KERNEL_BODY],
                         ids=[n for n, _ in FUNCTIONS if n not in NO_KERNEL_BODY])
def test_junk_in_any_required_argument_is_a_trnsim_error(name, function):
    """Every required argument a tile, then each in turn replaced by junk: whatever happens, only a
    TrnsimError may come out (a raw AttributeError from inside trnsim is a bug)."""
    required = [p for p in inspect.signature(function).parameters.values() if p.default is p.empty]
    count = len(required)
    calls = [[None] * count] + [[junk if i == j else None for i in range(count)]
                                for j in range(count) for junk in JUNK]

    def kernel(a):
        tile = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=tile, value=1.0)
        for arguments in calls:
            try:
                function(*[tile if value is None else value for value in arguments])
            except TrnsimError:
                pass

    nki.simulate(kernel)(np.ones((4, 4), np.float32))
    nki.trace(kernel, np.ones((4, 4), np.float32))
