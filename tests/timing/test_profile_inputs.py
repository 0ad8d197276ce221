"""Profiles of unusual launches and inputs: LNC=2 utilization, spill queues, bad arguments,
target spellings, and report files written whole."""

import math

import pytest
from timing_builders import load, region

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import hardware
from trnsim.core.isa import Memory
from trnsim.core.trace import Trace
from trnsim.errors import ConfigError
from trnsim.nki import TensorSpec
from trnsim.reports import profile
from trnsim.timing.profile import profile_trace, summarize
from trnsim.timing.report_html import summary_html
from trnsim.timing.schedule import schedule

ARGS = TensorSpec((128, 128), "bfloat16"), TensorSpec((128, 512), "bfloat16")


@nki.jit
def matmuls(lhsT, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for _ in range(200):
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_an_lnc2_launch_is_measured_against_both_cores_peaks():
    one = profile(matmuls, *ARGS, targets="trn2").summary("trn2")
    flops = 2 * 2 * 200 * 128 * 128 * 512  # both cores run the whole kernel
    two = profile(matmuls[2], *ARGS, targets=["trn2"], model_flops=flops).summary("trn2")
    assert two.flops == 2 * one.flops and 0 < two.hfu <= 1
    # the same work per core, in at least the same time (here the same: nothing orders the cores)
    assert one.hfu / 2 < two.hfu <= one.hfu * (1 + 1e-9)
    assert two.mfu == pytest.approx(two.hfu)
    assert two.peak_flops_per_s == pytest.approx(2 * hardware.core("trn2").peak_flops["bf16"])


def test_the_spill_queue_is_an_engine_of_its_own_so_no_dma_busy_time_exceeds_the_kernel():
    trace = Trace("trn2")
    for spill in (False, True):
        for _ in range(16):
            extra = {"spill": True} if spill else {}
            sbuf, hbm = region(Memory.SBUF, 4096, dtype="float32"), region(Memory.HBM, 4096, dtype="float32")
            trace.append(load(sbuf, hbm, **extra))
    summary = summarize(schedule(trace, "trn2"))
    assert {"dma", "dma_spill"} <= set(summary.engines)
    assert summary.engines["dma"].instructions == 16 and summary.engines["dma_spill"].instructions == 16
    assert all(0 < use.busy_fraction <= 1 for use in summary.engines.values())


@pytest.mark.parametrize("flops", [-1e9, -0.0, 10**400, math.nan, math.inf, "1e9", True])
def test_model_flops_must_be_a_finite_number(flops):
    timeline = schedule(Trace("trn2", [load(region(Memory.SBUF, 512), region(Memory.HBM, 512))]), "trn2")
    with pytest.raises(ConfigError, match="model_flops"):
        summarize(timeline, model_flops=flops)
    with pytest.raises(ConfigError, match="model_flops"):
        profile(matmuls, *ARGS, targets="trn2", model_flops=flops)


@pytest.mark.parametrize("top", [-1, 2.5, "3"])
def test_the_hotspot_count_must_be_a_whole_number(top):
    timeline = schedule(Trace("trn2", [load(region(Memory.SBUF, 512), region(Memory.HBM, 512))]), "trn2")
    with pytest.raises(ConfigError, match="top="):
        summarize(timeline, top=top)


def test_targets_are_found_by_any_name_of_their_core_and_timed_once():
    result = profile(matmuls, *ARGS, targets=["TRN2", "trn2", "NeuronCore-v3", "trn1"])
    assert list(result.results) == ["TRN2", "trn1"]
    assert result.latency_s("trn2") == result.latency_s("TRN2") == result.latency_s("NeuronCore-v3")
    with pytest.raises(ConfigError, match="not profiled on 'trn3'.*profiled on: TRN2, trn1"):
        result.summary("trn3")


def test_no_targets_is_refused_rather_than_replaced():
    with pytest.raises(ConfigError, match="names no target"):
        profile(matmuls, *ARGS, targets=[])
    trace = nki.trace(matmuls, *ARGS, target="trn2")
    with pytest.raises(ConfigError, match="names no target"):
        profile_trace(trace, [])


def test_bad_profile_arguments_are_config_errors_naming_the_argument(tmp_path):
    trace = nki.trace(matmuls, *ARGS, target="trn2")
    calls = {"target=": lambda: profile(matmuls, *ARGS, target="trn2"),
             "targets=5": lambda: profile(matmuls, *ARGS, targets=5),
             "targets: None": lambda: profile(matmuls, *ARGS, targets=[None]),
             "targets=5 ": lambda: profile_trace(trace, 5),
             "summarize takes a Timeline": lambda: summarize(trace),
             "stem=5": lambda: profile(matmuls, *ARGS, targets="trn2").write(tmp_path, stem=5)}
    for words, call in calls.items():
        with pytest.raises(ConfigError, match=words.strip()):
            call()
    assert list(profile_trace(trace, "trn1")) == ["trn1"]      # one name is one target


def test_a_profile_is_found_by_its_core_spec_and_names_what_it_was_profiled_on():
    spec = hardware.core("trn2")
    result = profile(matmuls, *ARGS, targets=[spec, "trn2", "trn1"])
    assert list(result.results) == [spec.name, "trn1"]          # one core is timed once
    assert result.summary(spec) is result.summary("trn2")
    for unknown in ("trn9", "inf1", None):
        with pytest.raises(ConfigError, match=f"not profiled on {unknown!r}.*profiled on: "):
            result.summary(unknown)


def test_a_core_spec_may_be_the_first_target():
    spec = hardware.core("trn2")
    result = profile(matmuls, *ARGS, targets=[spec, "trn1"])
    assert result.latency_s(spec.name) > 0 and result.latency_s("trn1") > 0


def test_mfu_says_why_it_is_missing_when_the_flops_were_given():
    summary = summarize(schedule(Trace("trn2"), "trn2"), model_flops=1e12)
    assert summary.mfu is None and "the kernel takes no time" in summary_html(summary)


def test_a_report_is_written_whole_or_not_at_all(tmp_path):
    result = profile(matmuls, *ARGS, targets="trn2")
    (tmp_path / "matmuls.json").mkdir()
    with pytest.raises(ConfigError, match=r"matmuls\.json.*is a directory"):
        result.write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matmuls.json"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot write"):
        result.write(tmp_path / "file")


def test_a_report_stem_never_leaves_its_directory(tmp_path):
    inner = tmp_path / "inner"
    page, events = profile(matmuls, *ARGS, targets="trn2").write(inner, stem="../escaped")
    assert page.parent == events.parent == inner and not page.name.startswith(".")
