"""The neuron device as PyTorch code sees it: module, moves, printing, factories, save/load."""

import copy
import io

import pytest
import torch
from torch import nn

import trnsim.torch
from trnsim.errors import UnsupportedError
from trnsim.torch import DeviceMismatchError


def test_torch_neuron_module_answers_what_pytorch_asks():
    assert torch.neuron.is_available() and torch.neuron.is_initialized()
    assert torch.neuron.current_device() == 0
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.bfloat16 in torch.neuron.get_amp_supported_dtype()
    torch.neuron.synchronize()
    stream = torch.neuron.current_stream()
    assert stream.device == torch.device("neuron", 0)
    event = torch.neuron.Event()
    with torch.neuron.stream(stream):
        event.record(stream)
    event.synchronize()
    assert event.query() and stream.query()
    with pytest.raises(UnsupportedError, match="trnsim.torch.profile"):
        event.elapsed_time(torch.neuron.Event())


def test_to_and_back_keeps_values_dtype_and_shape():
    cpu = torch.randn(3, 5).to(torch.float64)
    x = cpu.to("neuron")
    assert x.device.type == "neuron" and x.is_neuron and x.device == torch.device("neuron", 0)
    assert x.dtype == torch.float64 and x.shape == (3, 5)
    assert torch.equal(x.cpu(), cpu)
    assert torch.equal(cpu.neuron().cpu(), cpu)
    assert x.sum().item() == cpu.sum().item()
    assert x.tolist() == cpu.tolist()


def test_printing_shows_values_and_device():
    text = repr(torch.tensor([1.5, -2.0], device="neuron", requires_grad=True) * 2)
    assert "3." in text and "-4." in text and "device='neuron:0'" in text and "grad_fn" in text
    assert f"{torch.tensor(2.25, device='neuron'):.1f}" == "2.2"


def test_factories_build_on_the_device_with_cpu_values():
    torch.manual_seed(3)
    expected = torch.randn(4, 4)
    torch.neuron.manual_seed(3)
    made = torch.randn(4, 4, device="neuron")
    assert made.device.type == "neuron" and torch.equal(made.cpu(), expected)
    assert torch.equal(torch.arange(6, device="neuron").cpu(), torch.arange(6))
    assert torch.equal(torch.full((2,), 7.0, device="neuron").cpu(), torch.full((2,), 7.0))
    assert torch.tensor([[1, 2]], device="neuron").cpu().tolist() == [[1, 2]]


def test_set_default_device_and_meta_init_then_to_empty():
    with torch.device("neuron"):
        layer = nn.Linear(3, 2)
    assert layer.weight.device.type == "neuron" and isinstance(layer.weight, nn.Parameter)
    with torch.device("meta"):
        lazy = nn.Linear(3, 2)
    lazy = lazy.to_empty(device="neuron")
    assert lazy.weight.device.type == "neuron" and lazy.weight.shape == (2, 3)
    torch.set_default_device("neuron")
    try:
        assert torch.zeros(2).device.type == "neuron"
    finally:
        torch.set_default_device("cpu")


def test_tied_weights_and_parameters_survive_to():
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight
    model.to("neuron")
    assert model[1].weight is model[0].weight
    assert isinstance(model[0].weight, nn.Parameter) and model[0].weight.device.type == "neuron"
    assert len(list(model.parameters())) == 1


def test_save_and_weights_only_load_round_trip():
    model = nn.Linear(4, 3).to("neuron")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state["weight"].device.type == "neuron"
    assert torch.equal(state["weight"].cpu(), model.weight.detach().cpu())


def test_mixing_a_cpu_tensor_raises_but_a_0_dim_one_is_allowed():
    x = torch.ones(3, device="neuron")
    with pytest.raises(DeviceMismatchError, match=r"aten\.add\.Tensor.*shape \[3\]") as info:
        x + torch.ones(3)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, trnsim.TrnsimError)
    assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))
    x.copy_(torch.arange(3.0))
    assert x.cpu().tolist() == [0.0, 1.0, 2.0]


def test_views_alias_and_in_place_ops_return_the_callers_tensor():
    base = torch.zeros(2, 3, device="neuron")
    row = base[1]
    result = row.add_(5)
    assert result is row
    assert base.cpu().tolist() == [[0, 0, 0], [5, 5, 5]]
    out = torch.empty(2, 3, device="neuron")
    assert torch.add(base, 1, out=out) is out


def test_numpy_refuses_like_a_real_device():
    with pytest.raises(TypeError, match="cpu"):
        torch.ones(2, device="neuron").numpy()


def test_device_mismatch_error_is_documented_with_its_anchor():
    import pathlib

    docs = pathlib.Path(__file__).resolve().parents[2] / "docs" / "errors.md"
    assert f"## {DeviceMismatchError.anchor}\n" in docs.read_text()
    assert DeviceMismatchError.__doc__ and "Fix" in DeviceMismatchError.__doc__


@pytest.mark.parametrize("make", [
    lambda d: torch.eye(3, device=d), lambda d: torch.linspace(0, 1, 5, device=d),
    lambda d: torch.randperm(5, device=d), lambda d: torch.tril_indices(3, 3, device=d),
    lambda d: torch.randint(0, 9, (4,), device=d), lambda d: torch.rand(3, device=d),
    lambda d: torch.arange(0, 1, 0.25, device=d), lambda d: torch.bartlett_window(4, device=d),
    lambda d: torch.scalar_tensor(3.0, device=d),
    lambda d: torch.empty_strided((2, 2), (1, 2), device=d).stride(),
], ids=["eye", "linspace", "randperm", "tril_indices", "randint", "rand", "arange", "window", "scalar",
        "strided"])
def test_factories_match_cpu_from_the_same_seed(make):
    from trnsim import config

    torch.manual_seed(0)
    expected = make("cpu")
    torch.manual_seed(0)
    with config.override(strict=True):
        got = make("neuron")
    if isinstance(expected, torch.Tensor):
        assert got.device.type == "neuron" and torch.equal(got.cpu(), expected)
    else:
        assert got == expected


@pytest.mark.parametrize("location", ["neuron", "neuron:0", torch.device("neuron")])
def test_load_with_map_location_neuron_puts_every_tensor_on_neuron(location):
    """As on CUDA: the state dict comes back on the device, bit for bit, keeping its metadata."""
    torch.manual_seed(0)
    source = nn.Linear(3, 2)
    buffer = io.BytesIO()
    torch.save({"model": source.state_dict(), "step": 7, "both": [source.weight, source.weight]}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=location, weights_only=True)
    state = loaded["model"]
    assert hasattr(state, "_metadata") and loaded["step"] == 7
    assert all(t.device.type == "neuron" and not t.requires_grad for t in state.values())
    assert torch.equal(state["weight"].cpu(), source.weight.detach())
    assert loaded["both"][0] is loaded["both"][1]  # one tensor object stays one tensor
    model = nn.Linear(3, 2).to("neuron")
    model.load_state_dict(state)
    assert torch.equal(model.bias.cpu(), source.bias.detach())


def test_load_of_a_whole_module_onto_neuron_and_cpu_loads_unchanged():
    module = nn.Linear(3, 2)
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    moved = torch.load(buffer, map_location="neuron", weights_only=False)
    assert moved.weight.device.type == "neuron" and isinstance(moved.weight, nn.Parameter)
    buffer.seek(0)
    assert torch.load(buffer, map_location="cpu", weights_only=False).weight.device.type == "cpu"


def test_load_with_a_dict_map_location_to_neuron_maps_each_storage_as_on_cuda():
    torch.manual_seed(0)
    source = nn.Linear(3, 2)
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location={"cpu": "neuron"}, weights_only=True)
    assert all(t.device.type == "neuron" for t in state.values())
    assert torch.equal(state["weight"].cpu(), source.weight.detach())


def test_device_context_and_checkpointing_with_rng_state():
    from torch.utils.checkpoint import checkpoint

    with torch.neuron.device(0):
        layer = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).to("neuron")
    x = torch.randn(3, 4, device="neuron", requires_grad=True)
    checkpoint(layer, x, use_reentrant=False).sum().backward()
    assert x.grad.device.type == "neuron"


def test_assigning_data_replaces_the_values_not_only_the_shape():
    param = nn.Parameter(torch.ones(3, device="neuron"))
    param.data = torch.full((2,), 5.0, device="neuron")
    assert param.shape == (2,) and param.detach().cpu().tolist() == [5.0, 5.0]
    param.data.zero_()
    assert param.detach().cpu().tolist() == [0.0, 0.0]
    param.data = torch.ones(2)  # as on CUDA, host memory may take a device parameter's place
    assert param.device.type == "cpu" and param.tolist() == [1.0, 1.0]


def test_deepcopy_keeps_views_of_one_tensor_sharing_memory():
    """A deep copy raised for any tensor of more than one element, and for views at an offset."""
    base = torch.arange(6.0, device="neuron", requires_grad=True)
    view = base.detach()[2:]
    base_copy, view_copy = copy.deepcopy([base, view])
    assert base_copy.requires_grad and base_copy.device.type == "neuron"
    assert view_copy.storage_offset() == 2 and view_copy.shape == (4,)
    with torch.no_grad():
        base_copy[3] = 100.0
    assert view_copy.cpu().tolist() == [2.0, 100.0, 4.0, 5.0]
    assert base.detach().cpu().tolist() == list(range(6))


@pytest.mark.parametrize("change", [lambda t: t.unsqueeze_(0), lambda t: t.t_()], ids=["unsqueeze_", "t_"])
def test_assigning_data_shares_the_memory_but_not_the_layout(change):
    """a.data = b handed a b's buffer object itself: a.t_() changed b's buffer layout, not b's shape."""
    seen = {}
    for device in ("cpu", "neuron"):
        a, b = torch.ones(2, 3, device=device), torch.arange(6.0, device=device).reshape(2, 3)
        a.data = b
        change(a)
        a.add_(1)
        seen[device] = (b.shape, b[0].cpu(), b.sum(1).cpu(), a.shape, a.cpu())
    assert seen["neuron"][0] == seen["cpu"][0] and seen["neuron"][3] == seen["cpu"][3]
    for got, expected in zip(seen["neuron"][1:], seen["cpu"][1:], strict=True):
        assert torch.equal(torch.as_tensor(got), torch.as_tensor(expected))


def test_repr_of_a_neuron_tensor_traced_by_torch_compile_shows_no_values():
    """torch.compile's structured logs repr fake tensors: a fake neuron tensor prints as CUDA's do."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = torch.full((3, 4), 1.5, device="neuron")
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(real)
    text = repr(fake)
    assert "FakeTensor" in text and "device='neuron:0'" in text and "size=(3, 4)" in text
    assert "1.5000" in repr(real)
