"""Every op family common models reach runs on neuron bitwise equal to CPU (fp32), forward and
backward, in strict mode -- so an op that silently fell back to CPU would fail here."""

import pytest
import torch
from conftest import assert_same
from torch.nn import functional as F

import trnsim.torch
from trnsim import config
from trnsim.errors import UnsupportedError
from trnsim.torch.ops import FAMILIES


def _randn(*shape):
    return torch.randn(*shape)


def _index(high, *shape):
    return torch.randint(0, high, shape)


CASES = {}


def case(make_inputs):
    """Register `fn` as a case run on CPU and neuron with the inputs `make_inputs()` builds."""

    def register(fn):
        CASES[fn.__name__] = (fn, make_inputs)
        return fn

    return register


@case(lambda: [_randn(2, 5, 8), _randn(6, 8), _randn(6)])
def linear(x, w, b):
    return F.linear(x, w, b)


@case(lambda: [_randn(3, 4, 5), _randn(5, 2), _randn(2, 3, 4), _randn(2, 4, 5), _randn(2, 3, 5)])
def matmul_family(a, b, c, d, e):
    return [a @ b, torch.baddbmm(e, c, d, alpha=0.5), torch.einsum("bij,bjk->bik", c, d), torch.bmm(c, d)]


@case(lambda: [_randn(2, 3, 9, 9), _randn(4, 3, 3, 3), _randn(4), _randn(2, 4, 10), _randn(6, 2, 3)])
def convolutions(x, w, b, x1, w1):
    return [F.conv2d(x, w, b, stride=2, padding=1), F.conv1d(x1, w1, groups=2)]


@case(lambda: [_randn(4, 3, 5, 5), _randn(3), _randn(3), _randn(3, 4, 8), _randn(8), _randn(8)])
def norms(x, w, b, y, w1, b1):
    running_mean, running_var = torch.zeros(3, device=x.device), torch.ones(3, device=x.device)
    return [F.batch_norm(x, running_mean, running_var, w, b, training=True), running_mean,
            F.layer_norm(y, (8,), w1, b1), F.group_norm(y, 2), F.rms_norm(y, (8,), w1)]


@case(lambda: [_randn(10, 4), _index(10, 3, 5)])
def embedding(w, i):
    return F.embedding(i, w, padding_idx=0)


@case(lambda: [_randn(2, 3, 6, 8), _randn(2, 3, 6, 8), _randn(2, 3, 6, 8), torch.rand(6, 6) > 0.3])
def attention(q, k, v, mask):
    return [F.scaled_dot_product_attention(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask.float())]


@case(lambda: [_randn(2, 3, 6, 8), _randn(2, 3, 6, 8), _randn(2, 3, 6, 8), _randn(1, 3, 6, 6)])
def attention_with_learned_bias(q, k, v, bias):
    """A mask that requires grad (Swin's relative-position bias): CPU takes the math path; the
    device asked CPU's chooser about a mask without requires_grad and got the fused kernel, which
    has no gradient for it (RuntimeError on every forward with grad on)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


@case(lambda: [_randn(4, 7)])
def activations(x):
    return [F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), torch.sigmoid(x), torch.tanh(x),
            F.leaky_relu(x), F.elu(x), F.softplus(x), F.hardswish(x), F.mish(x), F.softmax(x, -1),
            F.log_softmax(x, -1)]


@case(lambda: [_randn(6, 5), _index(5, 6), _randn(6, 5)])
def losses(x, t, y):
    return [F.cross_entropy(x, t, label_smoothing=0.1, ignore_index=2), F.mse_loss(x, y),
            F.binary_cross_entropy_with_logits(x, y.sigmoid()), F.smooth_l1_loss(x, y), F.huber_loss(x, y),
            F.l1_loss(x, y), F.nll_loss(x.log_softmax(1), t)]


@case(lambda: [_randn(5, 6)])
def reductions(x):
    return [x.sum(1), x.mean(), x.amax(0), x.max(1).values, x.argmax(1), x.var(1), x.std(), x.norm(dim=1),
            x.logsumexp(1), x.cumsum(1), x.prod(1)]


@case(lambda: [_randn(5, 4), _index(5, 5), _randn(5, 4)])
def indexing(x, i, s):
    rows = torch.arange(2, device=x.device)
    return [x[i], x[x > 0], x.gather(1, i[:, None].expand(-1, 2) % 4), x.masked_fill(x < 0, 0.0),
            torch.where(x > 0, x, -x), x.topk(2, dim=1).values, x.sort(dim=1).values, x.index_select(0, i),
            torch.zeros(5, 4, device=x.device).scatter_add(0, (s.abs() * 4).long() % 5, x),
            x.index_put((rows,), s[:2]), x.index_copy(0, rows, s[:2]),
            x.clone().index_copy_(1, rows, s[:, :2])]


@case(lambda: [_randn(4, 4), _randn(4, 4)])
def shape_ops(x, y):
    return [torch.cat([x, y]), torch.stack([x, y]), F.pad(x, (1, 2)), x.tril(), x.repeat(2, 1), x.flip(0),
            x.roll(1, 1), x.view(-1), x.reshape(2, -1), x.permute(1, 0), x.t()[1:], x.narrow(1, 1, 2),
            x.unsqueeze(0).expand(3, -1, -1), *x.split(2), *x.chunk(2, 1), *x.unbind(0),
            x.transpose(0, 1).contiguous()]


@case(lambda: [_randn(2, 3, 6, 6)])
def pooling_and_resize(x):
    return [F.max_pool2d(x, 2), F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 3),
            F.interpolate(x, scale_factor=2, mode="nearest")]


@case(lambda: [_randn(3, 5), _randn(3, 5)])
def elementwise(x, y):
    positive = y.abs() + 1
    return [x + y, x - 2 * y, x * y, x / positive, x.exp(), positive.log(), positive.sqrt(), positive.rsqrt(),
            x.pow(2), x.clamp(-0.5, 0.5), torch.maximum(x, y), torch.lerp(x, y, 0.3),
            torch.addcmul(x, x, y, value=0.5), x.abs(), x.sign(), x.floor(), x.erf(), x.sin()]


def _run(fn, inputs, device):
    args = []
    for value in inputs:
        value = value.clone().to(device)
        if value.is_floating_point():
            value.requires_grad_(True)
        args.append(value)
    out = fn(*args)
    outs = out if isinstance(out, list) else [out]
    loss = sum((o.float() ** 2).sum() for o in outs if o.is_floating_point() and o.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()
    return outs, [a.grad for a in args if a.is_floating_point()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_family_matches_cpu_bitwise_forward_and_backward(name):
    fn, make_inputs = CASES[name]
    torch.manual_seed(0)
    inputs = make_inputs()
    expected, expected_grads = _run(fn, inputs, "cpu")
    with config.override(strict=True):
        got, got_grads = _run(fn, inputs, "neuron")
    assert_same([o.detach() for o in got], [o.detach() for o in expected])
    assert_same(got_grads, expected_grads)


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
    lambda p: torch.optim.Adam(p, lr=0.01, foreach=False),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
], ids=["adamw_default", "adamw_foreach", "adam_for_loop", "sgd_nesterov"])
def test_optimizer_steps_and_grad_clipping_match_cpu(make):
    torch.manual_seed(1)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    neuron_model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    neuron_model.load_state_dict(cpu_model.state_dict())
    neuron_model.to("neuron")
    data = torch.randn(5, 6)
    for model, device in ((cpu_model, "cpu"), (neuron_model, "neuron")):
        opt = make(model.parameters())
        with config.override(strict=(device == "neuron")):
            for _ in range(3):
                opt.zero_grad()
                model(data.to(device)).pow(2).mean().backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()
    for cpu_param, neuron_param in zip(cpu_model.parameters(), neuron_model.parameters(), strict=True):
        assert torch.equal(neuron_param.detach().cpu(), cpu_param.detach())


def test_dropout_draws_the_same_mask_as_cpu_from_the_same_seed():
    x = torch.ones(64)
    torch.manual_seed(5)
    expected = F.dropout(x, 0.5)
    torch.manual_seed(5)
    assert torch.equal(F.dropout(x.to("neuron"), 0.5).cpu(), expected)


def test_unimplemented_op_falls_back_with_one_warning_and_a_count():
    x = torch.tensor([3.0, 1.0, 2.0], device="neuron")
    with pytest.warns(trnsim.torch.FallbackWarning, match=r"aten\.kthvalue"):
        value = torch.kthvalue(x, 2).values
    assert value.item() == 2.0 and value.device.type == "neuron"
    torch.kthvalue(x, 1)
    # kthvalue is a composite of its out= overload, which is what reaches the device
    assert trnsim.torch.fallback_counts() == {"aten.kthvalue.values": 2}


def test_strict_mode_raises_unsupported_naming_the_overload():
    x = torch.tensor([3.0, 1.0], device="neuron")
    with config.override(strict=True), pytest.raises(UnsupportedError, match=r"kthvalue\.values") as info:
        torch.kthvalue(x, 1)
    assert info.value.what == "aten.kthvalue.values"
    assert trnsim.torch.fallback_counts() == {}


def test_every_family_entry_names_a_real_aten_op():
    assert len(FAMILIES) > 300
    assert [name for name in FAMILIES if not hasattr(torch.ops.aten, name)] == []


def test_composite_ops_arriving_whole_without_autograd_decompose_as_on_cpu():
    torch.manual_seed(2)
    cpu_layer = torch.nn.Linear(6, 3)
    neuron_layer = torch.nn.Linear(6, 3)
    neuron_layer.load_state_dict(cpu_layer.state_dict())
    neuron_layer.to("neuron")
    x = torch.randn(4, 6)
    with config.override(strict=True):
        for mode in (torch.inference_mode, torch.no_grad):
            with mode():
                assert_same(neuron_layer(x.to("neuron")), cpu_layer(x))


def test_comparison_and_set_ops_run_on_the_device():
    x = torch.tensor([3.0, 1.0, 3.0, 2.0])
    n = x.to("neuron")
    with config.override(strict=True):
        assert torch.allclose(n, n) and torch.equal(n, n)
        assert_same(torch.unique(n), torch.unique(x))
        assert_same(torch.isclose(n, n + 1e-9), torch.isclose(x, x + 1e-9))
        assert_same(torch.searchsorted(n.sort().values, n), torch.searchsorted(x.sort().values, x))
        torch.manual_seed(0)
        expected = torch.multinomial(x, 2)
        torch.manual_seed(0)
        assert_same(torch.multinomial(n, 2), expected)


@pytest.mark.parametrize("change", [
    lambda x: x.unsqueeze_(0), lambda x: x.t_(), lambda x: x.squeeze_(), lambda x: x.transpose_(0, 1),
    lambda x: x.resize_(2, 2), lambda x: x.as_strided_((2,), (2,)),
    lambda x: x.set_(torch.ones(3, device=x.device)),
], ids=["unsqueeze_", "t_", "squeeze_", "transpose_", "resize_smaller", "as_strided_", "set_"])
def test_in_place_layout_changes_reach_the_callers_tensor(change):
    x = torch.arange(4.0).reshape(1, 4)
    n = x.to("neuron")
    expected = change(x)
    with config.override(strict=True):
        got = change(n)
    assert got is n
    assert n.shape == expected.shape and n.stride() == expected.stride()
    assert torch.equal(n.cpu(), expected.cpu())


def test_growing_a_tensor_in_place_works_as_on_cpu():
    """Growth past the memory a tensor was made with used to raise UnsupportedError."""
    x = torch.arange(16.0).reshape(4, 4)
    n = x.to("neuron")
    with config.override(strict=True):
        assert n.resize_(5, 5) is n
        out = torch.empty(0, device="neuron")
        assert torch.add(torch.ones(2, 3, device="neuron"), 1, out=out) is out
    assert n.shape == n.cpu().shape == (5, 5)
    assert torch.equal(n.cpu().flatten()[:16], torch.arange(16.0))
    assert_same(out, torch.full((2, 3), 2.0))


def _spd():
    torch.manual_seed(0)
    a = torch.randn(3, 3)
    return a @ a.T + 3 * torch.eye(3)


OUT_CASES = {
    "inv": lambda a, new: torch.linalg.inv(a, out=new(3, 3)),
    "det": lambda a, new: torch.linalg.det(a, out=new()),
    "slogdet": lambda a, new: torch.linalg.slogdet(a, out=(new(), new())),
    "cholesky": lambda a, new: torch.linalg.cholesky(a, out=new(3, 3)),
    "solve": lambda a, new: torch.linalg.solve(a, a, out=new(3, 3)),
    "solve_ex": lambda a, new: torch.linalg.solve_ex(a, a, out=(new(3, 3), new(dtype=torch.int32))),
    "lu_factor": lambda a, new: torch.linalg.lu_factor(a, out=(new(3, 3), new(3, dtype=torch.int32))),
    "ldl_factor": lambda a, new: torch.linalg.ldl_factor(a, out=(new(3, 3), new(3, dtype=torch.int32))),
    "logsigmoid": lambda a, new: torch._C._nn.log_sigmoid(a, out=new(3, 3)),
    "msort": lambda a, new: torch.msort(a, out=new(3, 3)),
}


@pytest.mark.parametrize("name", OUT_CASES)
def test_out_tensors_of_the_right_shape_match_cpu(name):
    """The ops' own internal out= buffers (info, sign, indices) start empty and grow: that raised
    "grew a neuron tensor in place", blaming the caller's out tensor."""
    a = _spd()
    expected = OUT_CASES[name](a, lambda *shape, dtype=torch.float32: torch.empty(shape, dtype=dtype))
    got = OUT_CASES[name](a.to("neuron"), lambda *shape, dtype=torch.float32: torch.empty(
        shape, dtype=dtype, device="neuron"))
    assert_same(got, expected)


@pytest.mark.parametrize("hermitian", [False, True])
def test_matrix_rank_writes_its_out_tensor(hermitian):
    """PyTorch's matrix_rank rebinds its out reference for tensor subclasses: out kept its old values."""
    torch.manual_seed(0)
    a = torch.randn(2, 3, 3)
    a[1, 2] = a[1, 0]
    a = a @ a.mT
    out = torch.full((2,), 7, device="neuron")
    assert torch.linalg.matrix_rank(a.to("neuron"), hermitian=hermitian, out=out) is out
    assert_same(out, torch.linalg.matrix_rank(a, hermitian=hermitian))
    assert out.cpu().tolist() == [3, 2]


def test_conjugate_views_are_honoured():
    """(x.conj() * x) came out as x * x: the lazy conjugate bit was ignored below the Python key."""
    c = torch.tensor([1 + 2j, 3 - 4j])
    n = c.to("neuron")
    assert torch.equal((n.conj() * n).sum().cpu(), (c.conj() * c).sum())
    assert torch.equal((n.conj() + 0).cpu(), c.conj() + 0)
    assert torch.equal(n.conj().imag.cpu(), c.conj().imag)


def test_attention_under_inference_mode_takes_cpus_kernel():
    """inference_mode skips the Autograd-key kernel that picks CPU's fused attention: the op fell
    to the unfused math path and differed from CPU in the last bits."""
    torch.manual_seed(1)
    q = torch.randn(2, 4, 6, 8)
    with torch.inference_mode():
        expected = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        on_neuron = q.to("neuron")
        got = F.scaled_dot_product_attention(on_neuron, on_neuron, on_neuron, is_causal=True)
    assert torch.equal(got.cpu(), expected)


def test_a_tensor_built_from_a_list_of_neuron_scalars():
    """torch.tensor([loss1, loss2]) raised NotImplementedError for aten::_local_scalar_dense."""
    losses = [torch.tensor(1.5, device="neuron"), torch.tensor(2.5, device="neuron")]
    assert torch.equal(torch.tensor(losses), torch.tensor([1.5, 2.5]))
    assert torch.equal(torch.stack(losses).cpu(), torch.tensor([1.5, 2.5]))


def _forward_mode(device: str) -> list:
    torch.manual_seed(0)
    x, w = torch.randn(5, 3).to(device), torch.randn(3, 2).to(device)
    out = [torch.func.jvp(lambda v: x[:3, :2] + v, (w,), (torch.ones(3, 2).to(device),))[1]]
    out.append(torch.func.jacfwd(lambda v: x @ v)(w))
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(w, torch.ones(3, 2).to(device))
        out.append(torch.autograd.forward_ad.unpack_dual(x @ dual).tangent)
    return [t.cpu() for t in out]


def test_forward_mode_ad_with_a_missing_tangent_matches_cpu():
    """The zero tangent PyTorch makes (a data-less ZeroTensor) crashed the process (jvp) or raised
    a raw RuntimeError (jacfwd, forward_ad through a matmul)."""
    for neuron, cpu in zip(_forward_mode("neuron"), _forward_mode("cpu"), strict=True):
        assert torch.equal(neuron, cpu)


@pytest.mark.parametrize("bins, low, high", [(4, 0, 3), (3, 0, 7), (5, 0, 0), (2, 1, 1), (6, -3, 9)])
def test_histc_of_an_integer_tensor_counts_as_cuda_does(bins, low, high):
    """CPU's histc refuses integer dtypes, CUDA's counts them (Hugging Face MoE layers rely on it):
    the counts equal CPU's float histc of the same values, in the input's dtype; out= too."""
    values = torch.tensor([0, 1, 1, 3, 7, -2, 9, 4], dtype=torch.int32)
    expected = torch.histc(values.float(), bins=bins, min=low, max=high).to(torch.int32)
    with config.override(strict=True):
        assert_same(torch.histc(values.to("neuron"), bins=bins, min=low, max=high), expected)
        out = torch.empty(0, dtype=torch.int32, device="neuron")
        assert torch.histc(values.to("neuron"), bins=bins, min=low, max=high, out=out) is out
    assert_same(out, expected)


def test_cuda_only_batch_norm_ops_are_refused_by_name():
    """SyncBatchNorm's statistics op ran on CPU buffers, which have no kernel for it."""
    x = torch.randn(4, 3, 5).to("neuron")
    with pytest.raises(UnsupportedError, match="batch_norm_stats.*CUDA kernels only"):
        torch.batch_norm_stats(x, 1e-5)
