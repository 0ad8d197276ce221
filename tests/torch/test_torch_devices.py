"""One neuron device per rank: the node's device count, set_device, and tensors on neuron:N."""

import pytest
import torch

import trnsim.torch  # noqa: F401
from trnsim import config
from trnsim.errors import UnsupportedError
from trnsim.torch import DeviceMismatchError


@pytest.fixture
def device_one():
    torch.neuron.set_device(1)
    yield torch.device("neuron", 1)
    torch.neuron.set_device(0)


def test_device_count_is_the_logical_cores_of_the_node(monkeypatch):
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    with config.override(target="trn2"):
        assert torch.neuron.device_count() == 64  # 16 chips x 8 cores, LNC=2
        monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
        assert torch.neuron.device_count() == 128
    with config.override(target="trn1"):
        assert torch.neuron.device_count() == 32
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "3")
    with pytest.raises(trnsim.errors.ConfigError, match="NEURON_LOGICAL_NC_CONFIG"):
        torch.neuron.device_count()


def test_an_index_beyond_the_node_is_refused():
    count = torch.neuron.device_count()
    with pytest.raises(UnsupportedError, match=f"neuron:{count} does not exist"):
        torch.neuron.set_device(count)
    with pytest.raises(UnsupportedError, match=f"neuron:{count}"):
        torch.ones(2).to(f"neuron:{count}")


def test_the_current_device_receives_factories_and_results(device_one):
    assert torch.neuron.current_device() == 1
    x = torch.ones(3, device="neuron")
    y = torch.ones(3).to("neuron")
    assert x.device == y.device == device_one
    assert (x + y).device == device_one and (x @ y).device == device_one


def test_results_follow_their_inputs_device_not_the_current_one():
    x = torch.arange(4.0, device="neuron:2")  # index 0 would mean "the current device"
    assert x.device == torch.device("neuron", 2) and torch.neuron.current_device() == 0
    assert (x * 2).device == torch.device("neuron", 2)
    assert x.to("neuron:3").device == torch.device("neuron", 3)
    assert torch.equal(x.to("neuron:3").cpu(), torch.arange(4.0))
    with torch.neuron.device(5):
        assert torch.zeros(1, device="neuron").device == torch.device("neuron", 5)
    assert torch.zeros(1, device="neuron").device == torch.device("neuron", 0)


def test_an_op_mixing_two_devices_is_refused_and_copy_moves_between_them():
    """As on CUDA; it ran, and its result went to the first input's device."""
    a, b = torch.ones(2, device="neuron:0"), torch.full((2,), 2.0, device="neuron:1")
    with pytest.raises(DeviceMismatchError, match=r"got a neuron:0 tensor and a neuron:1 tensor"):
        a + b
    b.copy_(a)
    assert b.device == torch.device("neuron", 1) and b.cpu().tolist() == [1.0, 1.0]


def test_pin_memory_is_a_host_copy():
    x = torch.arange(3.0)
    pinned = x.pin_memory()
    assert torch.equal(pinned, x) and pinned.data_ptr() != x.data_ptr()


def test_memory_statistics_count_live_buffers_against_the_cores_hbm_share(monkeypatch):
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    before = torch.neuron.memory_allocated()
    x = torch.ones(256, 1024, device="neuron")
    view = x[:10]  # shares x's buffer: counted once
    assert torch.neuron.memory_allocated() - before == 256 * 1024 * 4 and view.device.type == "neuron"
    with config.override(target="trn2"):
        free, total = torch.neuron.mem_get_info()
    assert total == 96 * 2**30 // 4  # trn2: 96 GiB HBM per chip, 4 logical cores (LNC=2) on it
    assert free == total - torch.neuron.memory_allocated()
    del x, view
    assert torch.neuron.memory_allocated() == before


def test_torch_accelerator_memory_calls_answer_for_neuron_and_refuse_what_is_not_kept():
    """PyTorch's own path stops in an INTERNAL ASSERT (no C++ allocator): trnsim answers."""
    assert torch.accelerator.current_accelerator().type == "neuron"
    x = torch.ones(64, 1024, device="neuron")
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated() > 0
    assert torch.accelerator.memory_reserved() == torch.neuron.memory_allocated()
    assert torch.accelerator.get_memory_info(0) == torch.neuron.mem_get_info(0)
    torch.accelerator.synchronize()
    torch.accelerator.empty_cache()
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    del x
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()


def test_an_index_pytorch_wrapped_around_is_explained():
    """neuron:999 reaches trnsim as neuron:-25 (PyTorch keeps 8 bits); the message said only that."""
    with pytest.raises(UnsupportedError, match="wraps around in PyTorch"):
        torch.zeros(1, device="neuron:999")


def test_torch_neuron_answers_what_device_generic_code_asks():
    """torch.cuda-style calls that generic training code makes: answered, or refused by name."""
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated()
    assert torch.neuron.is_bf16_supported() is True
    assert "logical NeuronCore" in torch.neuron.get_device_name()
    assert torch.neuron.max_memory_reserved() == torch.neuron.max_memory_allocated()


def test_a_model_moves_to_neuron_inside_inference_mode():
    """Module.to asks _has_compatible_shallow_copy_type under inference_mode: it raised
    DeviceMismatchError for the CPU parameter and its neuron copy."""
    with torch.inference_mode():
        model = torch.nn.Linear(2, 2).to("neuron")
    assert model.weight.device.type == "neuron"


def test_dlpack_export_is_refused():
    with pytest.raises(UnsupportedError, match="DLPack"):
        torch.from_dlpack(torch.arange(6.0).to("neuron"))


class _NeuronItems(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        return torch.full((3,), float(index), device="neuron")


def test_dataloader_workers_batch_neuron_tensors():
    """A worker collated neuron items into shared memory made on neuron, and crashed."""
    loader = torch.utils.data.DataLoader(_NeuronItems(), batch_size=4, num_workers=1)
    batches = list(loader)
    assert [b.device.type for b in batches] == ["neuron", "neuron"]
    expected = torch.arange(8.0).repeat_interleave(3).reshape(8, 3)
    assert torch.equal(torch.cat([b.cpu() for b in batches]), expected)


def test_a_neuron_tensor_prints_as_a_tensor_on_its_device():
    """It printed as NeuronTensor([...]); CUDA and CPU tensors print as tensor(...)."""
    x = torch.arange(6.0, device="neuron").reshape(2, 3)
    assert repr(x) == "tensor([[0., 1., 2.],\n        [3., 4., 5.]], device='neuron:0')"


def test_a_streams_recorded_event_synchronizes():
    """PyTorch's own Event asked the backend to synchronize and raised: FSDP2's default
    CPUOffloadPolicy(pin_memory=True) stopped in backward."""
    stream = torch.neuron.current_stream()
    event = stream.record_event()
    event.synchronize()
    stream.synchronize()
    assert stream.query() and event.query()
