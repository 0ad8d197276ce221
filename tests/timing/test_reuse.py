"""Old-API kernels are timed as neuronx-cc builds them: a loop-invariant compute instruction runs
once. NKI 0.6 kernels keep every instruction."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim.core.isa import Opcode
from trnsim.core.trace import NEURONX_CC, NKI_COMPILER
from trnsim.nki import legacy
from trnsim.timing.schedule import schedule

X = nki.TensorSpec((128, 512), "float32")


def _kernel(reload: bool = False, opcode: str = "multiply"):
    @nki.jit
    def kernel(x):
        a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for _ in nl.affine_range(4):
            if reload:
                nisa.dma_copy(dst=a, src=x)
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            if opcode == "dropout":
                nisa.dropout(dst=t, data=a, prob=0.5)
            else:
                nisa.tensor_tensor(dst=t, data1=a, data2=a, op=nl.multiply)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out
    return kernel


def _durations(trace, opcode: Opcode, compiler: str):
    trace.compiler = compiler
    timeline = schedule(trace, "trn1")
    picked = [i for i, ins in enumerate(trace)  # not the accumulation, which reads its own output
              if ins.opcode is opcode and ins.inputs[0].buffer != ins.outputs[0].buffer]
    return timeline.duration_s[picked].tolist(), timeline.latency_s


def test_an_old_api_kernel_computes_a_loop_invariant_product_once():
    trace = nki.trace(_kernel(), X, target="trn1")
    kept, kept_latency = _durations(trace, Opcode.TENSOR_TENSOR, NKI_COMPILER)
    reused, reused_latency = _durations(trace, Opcode.TENSOR_TENSOR, NEURONX_CC)
    assert len(kept) == 4 and all(d > 0 for d in kept)
    assert reused[0] == kept[0] and reused[1:] == [0.0, 0.0, 0.0]
    assert reused_latency < kept_latency


def test_a_product_of_a_reloaded_tile_is_computed_again():
    trace = nki.trace(_kernel(reload=True), X, target="trn1")
    reused, _ = _durations(trace, Opcode.TENSOR_TENSOR, NEURONX_CC)
    assert len(reused) == 4 and all(d > 0 for d in reused)


def test_random_numbers_are_drawn_every_time():
    trace = nki.trace(_kernel(opcode="dropout"), X, target="trn1")
    reused, _ = _durations(trace, Opcode.DROPOUT, NEURONX_CC)
    assert len(reused) == 4 and all(d > 0 for d in reused)


def test_traces_name_the_compiler_of_their_api():
    @legacy.jit
    def old(x):
        out = legacy.language.ndarray(x.shape, dtype=x.dtype, buffer=legacy.language.shared_hbm)
        legacy.language.store(out, legacy.language.load(x))
        return out

    x = np.ones((128, 512), np.float32)
    old(x)
    assert old.last_trace.compiler == NEURONX_CC
    kernel = _kernel()
    kernel(x)
    assert kernel.last_trace.compiler == NKI_COMPILER


def test_an_instruction_that_adds_to_the_accumulator_is_never_reused():
    """Six activations reducing into the registers were timed as three: the rest looked reused."""
    @nki.jit
    def kernel(x):
        a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        for _ in nl.affine_range(3):
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=t, op=nl.copy, data=a, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce)
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out
    durations, _ = _durations(nki.trace(kernel, X, target="trn1"), Opcode.ACTIVATION, NEURONX_CC)
    assert len(durations) == 3 and all(d > 0 for d in durations)


def test_a_failed_pair_of_writes_gives_an_existing_file_its_old_contents(tmp_path, monkeypatch):
    """A later rename failing deleted the file the first one had replaced."""
    import os

    from trnsim.errors import ConfigError
    from trnsim.timing.perfetto import write_all
    first, second = tmp_path / "a.html", tmp_path / "b.json"
    first.write_text("the user's page")
    replace = os.replace

    def failing(source, destination):
        if str(destination) == str(second):
            raise PermissionError(1, "Operation not permitted")
        return replace(source, destination)
    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(ConfigError, match="b.json"):
        write_all({first: "new page", second: "{}"})
    assert first.read_text() == "the user's page" and sorted(p.name for p in tmp_path.iterdir()) == ["a.html"]


@nki.jit
def _invariant_product_with_a_slow_reader(x):
    a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for _ in range(3):
        nisa.tensor_tensor(dst=t, data1=a, data2=a, op=nl.multiply)   # loop invariant
        nisa.dma_copy(dst=out, src=t)                                  # t's reader: a WAR wait
    return out


def test_a_reused_result_that_waits_for_a_reader_puts_the_reader_on_the_critical_path():
    trace = nki.trace(_invariant_product_with_a_slow_reader, nki.TensorSpec((128, 512), "float32"),
                      target="trn2")
    trace.compiler = NEURONX_CC
    timeline = schedule(trace)
    assert timeline.end_s[3] == timeline.start_s[3] > timeline.end_s[1]   # reused, after the store
    assert timeline.waited_on[3] == 2
    path = timeline.critical_path()
    assert all(timeline.end_s[a] <= timeline.start_s[b] for a, b in zip(path, path[1:], strict=False))
    assert 2 in path
