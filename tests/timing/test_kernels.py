"""Timing real kernels: the tutorial matmuls in trace-only mode, `reports.profile`, `trnsim run`."""

import json
import textwrap

import golden_timings
import pytest

from trnsim.cli import main
from trnsim.nki import TensorSpec
from trnsim.reports import profile
from trnsim.timing.profile import summarize
from trnsim.timing.schedule import latency_s, schedule


@pytest.fixture(scope="module")
def tutorial():
    return golden_timings.tutorial_module()


@pytest.fixture(scope="module")
def small_traces(tutorial):
    return tutorial.traces("small")


def test_trace_only_mode_records_instructions_without_values(small_traces):
    trace = small_traces["matmul_tiled"]
    M, K, N = 2048, 1024, 2048
    assert trace.counts()[next(iter(trace.counts()))] > 0
    matmuls = sum(1 for ins in trace if ins.opcode.value == "nc_matmul")
    assert matmuls == (M // 128) * (N // 512) * (K // 128)


def test_each_tutorial_step_is_faster_than_the_one_before(small_traces):
    for target in ("trn1", "trn2", "trn3"):
        times = [latency_s(trace, target) for trace in small_traces.values()]
        assert times == sorted(times, reverse=True), target


def test_blocking_moves_the_bottleneck_from_the_dma_queues_to_the_tensor_engine(small_traces):
    tiled = summarize(schedule(small_traces["matmul_tiled"], "trn1"))
    blocked = summarize(schedule(small_traces["matmul_blocked_mnk"], "trn1"))
    assert tiled.engines["dma"].busy_fraction > tiled.engines["tensor"].busy_fraction
    assert blocked.engines["tensor"].busy_fraction > 2 * tiled.engines["tensor"].busy_fraction
    assert blocked.hfu > 3 * tiled.hfu


def test_reports_profile_times_one_trace_on_several_targets(tutorial, tmp_path):
    specs = TensorSpec((512, 256), "bfloat16"), TensorSpec((512, 1024), "bfloat16")
    result = profile(tutorial.matmul_tiled, *specs, targets=["trn1", "trn2"])
    assert set(result.results) == {"trn1", "trn2"}
    assert result.latency_s("trn1") != result.latency_s("trn2")
    page, events = result.write(tmp_path)
    assert page.name == "matmul_tiled.html" and json.loads(events.read_text())["traceEvents"]


SCRIPT = """
    import numpy as np
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def double(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=2.0)
        nl.store(out, value=tile)
        return out

    result = nki.simulate(double)(np.ones((128, 512), np.float32))
    assert float(result[0, 0]) == 2.0
    print("script ran")
"""


def test_trnsim_run_profiles_every_launch_and_writes_reports(tmp_path, capsys):
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(SCRIPT))
    code = main(["run", "--target", "trn1,trn3", "--report", str(tmp_path / "out"), str(script)])
    captured = capsys.readouterr()
    assert code == 0
    assert "script ran" in captured.out
    assert "double" in captured.out and "trn1" in captured.out and "trn3" in captured.out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["double.html", "double.json"]


def test_trnsim_run_refuses_an_unknown_target(tmp_path, capsys):
    script = tmp_path / "empty.py"
    script.write_text("")
    assert main(["run", "--target", "trn9", str(script)]) == 2
    assert "trn9" in capsys.readouterr().err


def test_timings_match_the_golden_file(small_traces):
    """Regenerate with `python tests/timing/golden_timings.py --update-golden`, and say why."""
    document = json.loads(golden_timings.GOLDEN.read_text())
    measured = golden_timings.measure(small_traces)
    assert measured.keys() == document["kernels"].keys()
    tolerance = document["relative_tolerance"]
    for kernel, targets in document["kernels"].items():
        for target, expected in targets.items():
            got = measured[kernel][target]
            assert got["latency_s"] == pytest.approx(expected["latency_s"], rel=tolerance), (kernel, target)
            assert got["busy_s"] == pytest.approx(expected["busy_s"], rel=tolerance), (kernel, target)


EXP_SCRIPT = """
    import numpy as np
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def exp_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        nisa.exponential(dst=tile, src=tile)
        nl.store(out, value=tile)
        return out

    nki.trace(exp_kernel, nki.TensorSpec((128, 512), "float32"), target="trn3")
"""


def test_trnsim_run_skips_a_target_that_lacks_an_instruction_and_times_the_rest(tmp_path, capsys):
    script = tmp_path / "exp.py"
    script.write_text(textwrap.dedent(EXP_SCRIPT))
    assert main(["run", "--target", "trn2,trn3", str(script)]) == 0
    captured = capsys.readouterr()
    assert "exp_kernel not timed on trn2" in captured.err
    assert "trn3" in captured.out and "exp_kernel" in captured.out


def test_trnsim_run_leaves_out_the_kernels_trnsim_itself_launches(tmp_path, capsys):
    """The torch device times its ops with built-in kernels; only the script's own launches count."""
    script = tmp_path / "mixed.py"
    script.write_text(textwrap.dedent(SCRIPT) + textwrap.dedent("""
        import torch
        import trnsim.torch
        with trnsim.torch.profile(target="trn2") as prof:
            (torch.ones(64, 64, device="neuron") @ torch.ones(64, 64, device="neuron")).sum()
        assert prof.report().total_s > 0
    """))
    code = main(["run", "--target", "trn2", "--report", str(tmp_path / "out"), str(script)])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["double.html", "double.json"]


LEGACY_SCRIPT = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def old_copy(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out

x = np.ones((128, 64), np.float32)
assert np.array_equal(nki.simulate_kernel(old_copy, x), x)
"""


def test_trnsim_run_gives_an_old_api_script_the_old_api_and_times_each_core_once(tmp_path, capsys):
    script = tmp_path / "old.py"
    script.write_text(LEGACY_SCRIPT)
    assert main(["run", "--target", "trn2,TRN2,NeuronCore-v3", str(script)]) == 0, capsys.readouterr().err
    rows = [line for line in capsys.readouterr().out.splitlines() if "old_copy" in line]
    assert len(rows) == 1 and "trn2" in rows[0]
