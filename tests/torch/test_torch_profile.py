"""Device time and cost: from the kernel timing model, re-timed per target, monotone in size."""

import pytest
import torch
from torch_gpt import GPT, batches, train

import trnsim.torch
from trnsim import hardware, nki
from trnsim.cost import kernels
from trnsim.errors import ConfigError, SpecError, UnsupportedError
from trnsim.nki.jit import TensorSpec
from trnsim.timing import schedule
from trnsim.torch import devicetime


def _step_profile(d_model: int, batch: int, layers: int = 1):
    torch.manual_seed(0)
    model = GPT(vocab=128, d_model=d_model, layers=layers, heads=2, seq=16)
    data = batches(1, batch=batch, seq=16, vocab=128)
    train(model, data, steps=1, device="neuron")  # optimizer state exists before the measured step
    with trnsim.torch.profile(target="trn2") as prof:
        train(model, data, steps=1, device="neuron")
    return prof


@pytest.fixture(scope="module")
def profiles():
    return {(d, b): _step_profile(d, b) for d, b in ((64, 1), (64, 4), (128, 1))}


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_step_time_and_cost_grow_with_batch_and_width(profiles, target):
    small, wide, big_batch = (profiles[key].report(target) for key in ((64, 1), (128, 1), (64, 4)))
    assert 0 < small.total_s < wide.total_s and small.total_s < big_batch.total_s
    assert 0 < small.cost_usd < wide.cost_usd and small.cost_usd < big_batch.cost_usd
    assert small.untimed == {}
    assert 0 < small.matmul_share < 1
    instance = hardware.instance(small.instance)
    assert small.cost_usd == pytest.approx(small.total_s * instance.usd_per_hour / 3600 / instance.cores)


def test_the_table_shows_the_totals_cost_and_per_op_time_and_share(profiles):
    report = profiles[(64, 1)].report("trn2")
    header, columns, *rows = report.table().splitlines()
    assert f"{report.total_s * 1e3:.3f} ms" in header and f"${report.cost_usd:.3g}" in header
    assert columns.split() == ["op", "calls", "device", "time", "share"]
    top = report.ops[0]
    assert rows[0].split()[0] == top.op and f"{top.device_s / report.total_s:.1%}" in rows[0]


def test_a_profile_is_retimed_per_target_without_rerunning(profiles):
    prof = profiles[(64, 4)]
    trn1, trn2 = prof.report("trn1"), prof.report("trn2")
    assert trn1.total_s != trn2.total_s
    assert trn1.instance.startswith("trn1") and trn2.instance.startswith("trn2")
    assert prof.total_s == trn2.total_s


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_matmul_time_is_the_timing_models_figure_for_the_same_shape(target):
    a, b = torch.randn(200, 300, device="neuron"), torch.randn(300, 600, device="neuron")
    with trnsim.torch.profile(target=target) as prof:
        a @ b
    traced = nki.trace(kernels.matmul, TensorSpec((300, 200), "float32"), TensorSpec((300, 600), "float32"),
                       target=target)
    op = prof.report().per_op["aten.mm.default"]
    assert op.count == 1
    assert op.device_s == pytest.approx(schedule.latency_s(traced, target), rel=1e-12)
    assert op.matmul_s == op.device_s


def test_bf16_matmul_is_faster_than_fp32_and_lnc2_splits_the_work():
    a, b = torch.randn(1024, 512), torch.randn(512, 2048)
    with trnsim.torch.profile(target="trn2") as fp32:
        a.to("neuron") @ b.to("neuron")
    with trnsim.torch.profile(target="trn2") as bf16:
        a.to("neuron", torch.bfloat16) @ b.to("neuron", torch.bfloat16)
    mm32 = fp32.report().per_op["aten.mm.default"].device_s
    mm16 = bf16.report().per_op["aten.mm.default"].device_s
    assert mm16 < mm32
    assert bf16.report(lnc=2).per_op["aten.mm.default"].device_s < mm16
    with pytest.raises(ConfigError, match="logical cores"):
        bf16.report("trn1", lnc=2)


def test_cost_needs_a_price_and_untimed_ops_are_listed_not_guessed():
    x = torch.tensor([3.0, 1.0, 2.0], device="neuron")
    with trnsim.torch.profile(target="trn3") as prof, pytest.warns(trnsim.torch.FallbackWarning):
        torch.kthvalue(x, 2)
        x * 2
    report = prof.report()
    assert report.untimed == {"aten.kthvalue.values": 1}
    assert report.per_op["aten.mul.Tensor"].device_s > 0
    with pytest.raises(SpecError, match="price"):
        _ = report.cost_usd


def test_an_integer_matmul_is_untimed_and_the_report_still_comes():
    """report() raised the Tensor Engine's DTypeError for an int64 matmul: no kernel takes it."""
    a = torch.ones(4, 4, dtype=torch.int64, device="neuron")
    with trnsim.torch.profile(target="trn2") as prof:
        a @ a
        a.float() @ a.float()
    report = prof.report()
    assert report.untimed == {"aten.mm.default": 1}
    assert report.per_op["aten.mm.default"].count == 1 and "untimed" in report.table()
    signature = (((4, 4), "int64"), ((4, 4), "int64"))  # one op's time (a compiled graph's device_s) says why
    with pytest.raises(UnsupportedError, match="aten.mm.default of integer operands"):
        devicetime.op_time_s("aten.mm.default", signature, (((4, 4), "int64"),))


def test_an_instance_of_another_core_generation_is_refused_and_a_new_target_gets_its_own():
    """A trn1 profile was priced on trn2.48xlarge (and trn2 on inf2) silently; report("trn1") of a
    profile opened with a trn2 instance kept that instance."""
    x = torch.ones(8, 8, device="neuron")
    with pytest.raises(ConfigError, match="NeuronCore-v3"), trnsim.torch.profile(
            target="trn1", instance="trn2.48xlarge"):
        pytest.fail("the block ran")
    with trnsim.torch.profile(target="trn2", instance="trn2.48xlarge") as prof:
        x @ x
    with pytest.raises(ConfigError, match="inf2.48xlarge has NeuronCore-v2"):
        prof.report(instance="inf2.48xlarge")
    assert prof.report("trn1").instance == "trn1.32xlarge"
    assert prof.report("trn1", instance="inf2.48xlarge").instance == "inf2.48xlarge"  # both NeuronCore-v2


def test_compiled_graphs_are_charged_per_call_from_their_node_shapes():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 32).to("neuron")
    compiled = torch.compile(layer, backend="neuron")
    x = torch.randn(8, 64, device="neuron")
    compiled(x)
    with trnsim.torch.profile(target="trn2") as eager:
        layer(x)
    with trnsim.torch.profile(target="trn2") as graph:
        compiled(x)
        compiled(x)
    assert graph.report().per_op["aten.addmm.default"].count == 2
    assert graph.report().per_op["aten.addmm.default"].device_s == pytest.approx(
        2 * eager.report().per_op["aten.addmm.default"].device_s)


def test_ops_in_another_thread_are_recorded_in_the_open_profile():
    import threading

    x = torch.ones(4, 4, device="neuron")
    with trnsim.torch.profile() as prof:
        worker = threading.Thread(target=lambda: x @ x)  # as autograd's backward workers run
        worker.start()
        worker.join()
    assert prof.counts and any("aten.mm" in key[0] for key in prof.counts)


def test_report_refuses_a_gpu_instance_and_an_lnc_of_zero():
    """report(instance="p5.48xlarge") failed with a raw TypeError; lnc=0 became 1 silently."""
    x = torch.ones(8, 8, device="neuron")
    with trnsim.torch.profile(target="trn2") as prof:
        x @ x
    with pytest.raises(trnsim.ConfigError, match="no NeuronCores"):
        prof.report(instance="p5.48xlarge")
    with pytest.raises(trnsim.ConfigError, match="lnc=0"):
        prof.report(lnc=0)


def test_an_outer_profile_sees_the_ops_of_an_inner_one():
    """The outer block lost the matmul run inside the inner block."""
    x = torch.ones(8, 8, device="neuron")
    with trnsim.torch.profile(target="trn2") as outer:
        x + x
        with trnsim.torch.profile(target="trn2") as inner:
            x @ x
    assert "aten.mm.default" in outer.report().per_op and "aten.add.Tensor" not in inner.report().per_op


def test_bad_profile_settings_are_refused_when_the_block_opens():
    for settings in (dict(target="trn1", lnc=2), dict(instance="trn2.96xlarge")):
        with pytest.raises(trnsim.TrnsimError), trnsim.torch.profile(**settings):
            pytest.fail("the block ran")


def test_without_collectives_nothing_overlaps(profiles):
    """overlap_s came out -6.9e-18: two sums of the same op times in different orders."""
    for prof in profiles.values():
        report = prof.report()
        assert report.comm_s == 0 and report.overlap_s == 0.0
