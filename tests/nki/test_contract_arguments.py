"""Arguments the contract refuses that trnsim once accepted with a wrong answer (issue 11, item 7):
each is now a TrnsimError naming the argument and the kernel line."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.errors import ArgumentError, ShapeError, TrnsimError

X = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)


def _run(body, target="trn2"):
    """Run `body(tile, column)` in a kernel on a [32, 8] tile and a [1, 1] tile."""
    def kernel(x):
        tile = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        corner = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=corner, src=x[0:1, 0:1])
        body(tile, corner)
        out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out
    return nki.simulate(kernel, target=target)(X)


def test_a_1x1_operand_is_not_broadcast_over_32_partitions():
    """It used to read partition 0's value for every partition; the ISA takes a [P, 1] operand."""
    expected = (r"test_contract_arguments\.py:\d+ in <lambda>: nisa.tensor_scalar: "
                r"operand0 is a \[1, 1\] tile; a per-partition operand here is \[32, 1\]")
    with pytest.raises(ShapeError, match=expected):
        _run(lambda tile, corner: nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=corner))


@pytest.mark.parametrize("call,argument", [
    (lambda tile, corner: nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=None),
     "operand0=None"),
    (lambda tile, corner: nisa.memset(dst=tile, value=None), "value=None"),
    (lambda tile, corner: nisa.dropout(dst=tile, data=tile, prob=2.0), "prob=2.0"),
    (lambda tile, corner: nisa.dropout(dst=tile, data=tile, prob=-0.5), "prob=-0.5"),
    (lambda tile, corner: nisa.activation(dst=tile, op=nl.exp, data=tile, scale="2"), "scale='2'"),
    (lambda tile, corner: nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1e39),
     "operand0=1e+39"),
    (lambda tile, corner: nisa.tensor_tensor(dst=tile, data1=tile, data2=tile, op=nl.exp), "op='exp'"),
    (lambda tile, corner: nisa.tensor_reduce(dst=tile[:, 0:1], op=nl.power, data=tile, axis=1),
     "op='power'"),  # the ALU table: Power is no legal reduction op (Subtract is)
    (lambda tile, corner: nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0, reverse0="no"),
     "reverse0='no'"),
])
def test_a_bad_parameter_is_refused_by_name(call, argument):
    """Each used to produce NaN, a wrong value (bool('no') is True) or a raw numpy error."""
    with pytest.raises(ArgumentError, match=r"^test_contract_arguments\.py:\d+ in <lambda>: nisa\.\w+: "
                                            + argument.replace("(", r"\(").replace("+", r"\+")):
        _run(call)


def test_a_numpy_array_where_a_tile_goes_is_refused():
    with pytest.raises(ArgumentError, match="data2 is a numpy array"):
        _run(lambda tile, corner: nisa.tensor_tensor(dst=tile, data1=tile, data2=X, op=nl.add))


def test_an_unknown_engine_is_refused_with_the_choices():
    with pytest.raises(ArgumentError, match=r"engine='vectr'; it must be one of \['dma', 'gpsimd'"):
        _run(lambda tile, corner: nisa.tensor_copy(dst=tile, src=tile, engine="vectr"))


def test_a_trn3_parameter_on_trn2_is_refused_in_both_modes():
    def body(tile, corner):
        nisa.activate2(dst=tile, op=nl.exp, data=tile, imm0=1.0, imm1=2.0, op0=nl.add, op1=nl.multiply)

    with pytest.raises(TrnsimError, match=r"^test_contract_arguments\.py:\d+ in body: .*generation 4"):
        _run(body, target="trn2")


def test_a_value_legal_once_does_not_pass_as_another_type():
    """Legal parameter values are remembered by type as well as value (core/check.py): `1` and
    `1.0` equal `True`, yet reverse0 takes only a bool, after a legal True as before it."""
    def body(tile, corner):
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0, reverse0=True)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0, reverse0=1)
    with pytest.raises(ArgumentError, match="reverse0=1; it must be"):
        _run(body)
    with pytest.raises(ArgumentError, match=r"reverse0=1\.0; it must be"):
        _run(lambda tile, corner: nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=1.0,
                                                     reverse0=1.0))
