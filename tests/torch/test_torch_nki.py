"""NKI kernels called on neuron tensors run in the emulator and hand back neuron tensors."""

import pytest
import torch

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
import trnsim.torch
from trnsim.timing import schedule


@nki.jit
def add_rows(a, b):
    """out = a + b for [rows <= 128, cols] operands."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
    left = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.sbuf)
    right = nl.ndarray((rows, cols), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=a)
    nisa.dma_copy(dst=right, src=b)
    total = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=left, data2=right, op=nl.add)
    nisa.dma_copy(dst=out, src=total)
    return out


@nki.jit
def double_in_place(a):
    rows, cols = a.shape
    tile = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a)
    nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=a, src=tile)


def test_kernel_on_neuron_tensors_returns_neuron_tensors():
    a, b = torch.randn(64, 32), torch.randn(64, 32)
    out = trnsim.torch.nki_call(add_rows, a.to("neuron"), b.to("neuron"), target="trn2")
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), a + b)
    assert torch.equal((out * 2).cpu(), (a + b) * 2)


def test_kernel_writes_into_its_neuron_input():
    a = torch.arange(12.0).reshape(3, 4)
    x = a.to("neuron")
    trnsim.torch.nki_call(double_in_place, x, target="trn2")
    assert torch.equal(x.cpu(), a * 2)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_kernel_time_is_charged_to_the_profile_and_retimed(target):
    a = torch.randn(128, 512, device="neuron")
    with trnsim.torch.profile(target="trn2") as prof:
        trnsim.torch.nki_call(add_rows, a, a)
    seconds = schedule.latency_s(add_rows.last_trace, target)
    assert prof.report(target).per_op["nki.add_rows"].device_s == pytest.approx(seconds)
    assert seconds > 0


def test_calling_a_kernel_directly_on_neuron_tensors_gives_neuron_tensors():
    """`kernel(x)` and `nki.simulate(kernel)(x)` work as nki_call does, with no wrapper."""
    a, b = torch.randn(64, 32), torch.randn(64, 32)
    for run in (add_rows, nki.simulate(add_rows, target="trn2")):
        out = run(a.to("neuron"), b.to("neuron"))
        assert out.device.type == "neuron"
        assert torch.equal(out.cpu(), a + b)
    written = a.to("neuron")
    double_in_place(written)
    assert written.device.type == "neuron" and torch.equal(written.cpu(), a * 2)


def test_nki_call_refuses_cpu_tensors_as_an_eager_op_does():
    """CPU (and mixed CPU/neuron) inputs were run silently and came back as neuron tensors."""
    cpu = torch.ones(8, 4)
    for args, argument in (((cpu, cpu), "argument 0"), ((cpu.to("neuron"), cpu), "argument 1")):
        with pytest.raises(trnsim.torch.DeviceMismatchError, match=f"add_rows. got a cpu .*{argument}"):
            trnsim.torch.nki_call(add_rows, *args)
