"""nn.LSTM, nn.GRU and nn.RNN on neuron: CPU's values and gradients, bit for bit (trnsim.torch.rnn),
in each autograd mode, packed sequences included; the profiler charges forward and backward."""

import pytest
import torch

import trnsim.torch

LAYERS = [
    (torch.nn.LSTM, dict(num_layers=2, batch_first=True)),
    (torch.nn.GRU, dict(bidirectional=True)),
    (torch.nn.RNN, dict(nonlinearity="relu")),
    (torch.nn.LSTM, dict(proj_size=4)),  # not oneDNN on CPU: the native cells
]


def _pair(cls, options):
    torch.manual_seed(0)
    on_cpu = cls(8, 16, **options)
    on_neuron = cls(8, 16, **options)
    on_neuron.load_state_dict(on_cpu.state_dict())
    return on_cpu, on_neuron.to("neuron")


def _first(hidden):
    return hidden[0] if isinstance(hidden, tuple) else hidden


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("cls, options", LAYERS)
def test_outputs_and_gradients_are_cpus(cls, options):
    on_cpu, on_neuron = _pair(cls, options)
    x = torch.randn(3, 5, 8)
    out, hidden = on_cpu(x)
    (out.sum() + _first(hidden).sum()).backward()
    with trnsim.torch.profile(target="trn2") as prof:
        out_n, hidden_n = on_neuron(x.to("neuron"))
        (out_n.sum() + _first(hidden_n).sum()).backward()
    assert out_n.device.type == "neuron" and torch.equal(out_n.cpu(), out.detach())
    assert torch.equal(_first(hidden_n).cpu(), _first(hidden).detach())
    for mine, reference in zip(on_neuron.parameters(), on_cpu.parameters(), strict=True):
        assert mine.grad.device.type == "neuron" and torch.equal(mine.grad.cpu(), reference.grad)
    report = prof.report()
    assert report.untimed == {} and report.matmul_s > 0
    name = f"aten.{cls.__name__.lower() if cls is not torch.nn.RNN else 'rnn_relu'}.input"
    forward, backward = report.per_op[name], report.per_op[f"{name}.backward"]
    assert backward.device_s == pytest.approx(2 * forward.device_s)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_without_gradients_the_values_are_cpus_in_the_same_mode(mode):
    """CPU's oneDNN LSTM computes differently with gradients off, so compare mode with mode."""
    on_cpu, on_neuron = _pair(torch.nn.LSTM, dict(num_layers=2))
    x = torch.randn(5, 3, 8)
    with mode():
        assert torch.equal(on_neuron(x.to("neuron"))[0].cpu(), on_cpu(x)[0])


def test_packed_sequences_keep_batch_sizes_on_cpu_and_match_cpu():
    on_cpu, on_neuron = _pair(torch.nn.LSTM, dict())
    x = torch.randn(5, 3, 8, requires_grad=True)
    x_n = x.detach().to("neuron").requires_grad_()
    packed = torch.nn.utils.rnn.pack_padded_sequence(x_n, [5, 3, 2])
    assert packed.data.device.type == "neuron" and packed.batch_sizes.device.type == "cpu"
    out, _ = on_cpu(torch.nn.utils.rnn.pack_padded_sequence(x, [5, 3, 2]))
    out_n, _ = on_neuron(packed)
    padded, _ = torch.nn.utils.rnn.pad_packed_sequence(out)
    padded_n, _ = torch.nn.utils.rnn.pad_packed_sequence(out_n)
    assert torch.equal(padded_n.cpu(), padded.detach())
    padded.sum().backward()
    padded_n.sum().backward()
    assert torch.equal(x_n.grad.cpu(), x.grad)
    pairs = zip(on_neuron.parameters(), on_cpu.parameters(), strict=True)
    assert all(torch.equal(mine.grad.cpu(), reference.grad) for mine, reference in pairs)


def test_a_hidden_state_left_on_cpu_is_refused_as_cuda_refuses_it():
    _, on_neuron = _pair(torch.nn.GRU, dict())
    with pytest.raises(trnsim.torch.DeviceMismatchError):
        on_neuron(torch.randn(5, 3, 8).to("neuron"), torch.zeros(1, 3, 16))
    with torch.inference_mode(), pytest.raises(trnsim.torch.DeviceMismatchError):
        on_neuron(torch.randn(5, 3, 8).to("neuron"), torch.zeros(1, 3, 16))


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_give_cpus_values_and_gradients(cls):
    """On a PrivateUse1 device PyTorch's cells call the fused CUDA-style kernels, which CPU lacks:
    they raised NotImplementedError."""
    torch.manual_seed(0)
    on_cpu = cls(8, 16)
    on_neuron = cls(8, 16)
    on_neuron.load_state_dict(on_cpu.state_dict())
    on_neuron.to("neuron")
    x = torch.randn(3, 8)
    expected, got = on_cpu(x), on_neuron(x.to("neuron"))
    _first(expected).sum().backward()
    _first(got).sum().backward()
    assert torch.equal(_first(got).cpu(), _first(expected).detach())
    assert torch.equal(on_neuron.weight_ih.grad.cpu(), on_cpu.weight_ih.grad)


def test_a_retained_graph_backs_up_twice_as_on_cpu():
    """The second backward raised 'Trying to backward through the graph a second time'."""
    grads = []
    for device in ("cpu", "neuron"):
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(3, 4, batch_first=True).to(device)
        out, _ = lstm(torch.randn(2, 5, 3).to(device))
        out[:, -1].sum().backward(retain_graph=True)
        out[:, -1].sum().backward()
        grads.append(lstm.weight_ih_l0.grad.cpu())
    assert torch.equal(*grads)


def test_a_second_derivative_is_refused_not_silently_zero():
    """A gradient penalty through the LSTM added nothing to the weight gradients on neuron."""
    lstm = torch.nn.LSTM(3, 4, batch_first=True).to("neuron")
    x = torch.randn(2, 5, 3, device="neuron", requires_grad=True)
    out, _ = lstm(x)
    with pytest.raises(trnsim.UnsupportedError, match="second derivative"):
        torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
