"""The neuron device's C++ core: real tensors over host memory, CPU's kernels on zero-copy views,
and what happens on a machine where the core cannot be built."""

import os
import subprocess
import sys
import time

import pytest
import torch

from trnsim.errors import UnsupportedError
from trnsim.torch import buffer_of, to_neuron


def test_lazy_conjugate_and_negative_views_keep_their_bits():
    z = torch.randn(4, dtype=torch.complex64)
    on_device = z.to("neuron")
    assert torch.equal((on_device.conj() * 2).cpu(), z.conj() * 2)
    assert torch.equal(on_device.conj().cpu(), z.conj())
    assert torch.equal(torch.neg(on_device.conj()).cpu(), -z.conj())


def test_views_write_through_and_out_of_another_shape_grows_the_tensor():
    a, b = torch.randn(8, 8, device="neuron"), torch.randn(8, 8, device="neuron")
    a.view(64)[3] = 5.0
    assert a[0, 3].item() == 5.0
    out = torch.empty(0, device="neuron")
    torch.mul(a, b, out=out)
    assert out.shape == (8, 8) and torch.equal(out.cpu(), a.cpu() * b.cpu())


def test_cpu_views_share_memory_both_ways():
    x = torch.arange(4.0, device="neuron")
    buffer_of(x)[1] = 10.0
    assert x.cpu().tolist() == [0.0, 10.0, 2.0, 3.0]
    host = torch.zeros(3)
    view = to_neuron(host)
    view.add_(2)
    assert view.device.type == "neuron" and host.tolist() == [2.0, 2.0, 2.0]


def test_bf16_matmuls_accumulate_in_fp32_and_round_once():
    low = torch.randn(256, 256).bfloat16()  # TensorE's rule: fp32 products and sums, rounded once
    on_device = low.to("neuron")
    assert torch.equal((on_device @ on_device).cpu(), (low.float() @ low.float()).bfloat16())


def test_without_a_compiler_cpu_code_runs_and_neuron_is_refused_with_the_way_out(tmp_path):
    """A machine without c++ or ninja: nothing built yet in the cache, so the core cannot load."""
    code = ("import torch, trnsim\n"
            "assert torch.ones(2).add(1).tolist() == [2.0, 2.0] and not torch.neuron.is_available()\n"
            "try:\n    torch.ones(2, device='neuron')\n"
            "except trnsim.UnsupportedError as error:\n    print(error)\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PATH": os.path.dirname(sys.executable)}
    process = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=300)
    assert process.returncode == 0, process.stderr
    assert "C++ core needs c++" in process.stdout and "install a C++ compiler" in process.stdout


def test_pinned_memory_is_a_host_copy_that_knows_it_is_pinned():
    host = torch.ones(3)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned() and pinned.data_ptr() != host.data_ptr()
    assert pinned.pin_memory() is pinned


def test_ddp_that_finds_unused_parameters_matches_cpu(tmp_path):
    """DDP's reducer pins a map of used parameters and checks it is pinned: an INTERNAL ASSERT."""
    import copy

    import torch.distributed as dist

    dist.init_process_group("neuron", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    wrapped = []
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        on_cpu = copy.deepcopy(model)
        wrapped = [torch.nn.parallel.DistributedDataParallel(m, find_unused_parameters=True)
                   for m in (model.to("neuron"), on_cpu)]
        x = torch.randn(3, 4)
        wrapped[0](x.to("neuron")).sum().backward()
        wrapped[1](x).sum().backward()
        assert all(torch.equal(a.grad.cpu(), b.grad) for a, b in zip(model.parameters(), on_cpu.parameters(),
                                                                      strict=True))
    finally:
        dist.destroy_process_group()
        # The reducers hold the last references to the gloo group, whose destructor joins its worker
        # threads while holding the GIL; a worker still freeing its last allreduce needs the GIL, and
        # the two waited for each other (a hang seen once in CI, torch 2.13). Let the workers finish
        # first (sleep releases the GIL), then drop the reducers.
        time.sleep(0.2)
        wrapped.clear()


def _nested():
    return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])


@pytest.mark.parametrize("make", [lambda: torch.eye(3).to_sparse().to("neuron"),
                                  lambda: _nested().to("neuron"),
                                  lambda: torch.eye(3, device="neuron").to_sparse()],
                         ids=["sparse", "nested", "made-sparse"])
def test_sparse_and_nested_tensors_are_refused_by_name(make):
    """Sparse and nested tensors are refused by name. Making a sparse tensor from a neuron one used
    to raise PyTorch's own NotImplementedError ("Cannot access storage of SparseTensorImpl")."""
    with pytest.raises(UnsupportedError, match="strided tensors only"):
        make()


def test_nested_forward_mode_autograd_matches_cpu():
    """jacfwd of grad and a jvp of a jvp crashed the process on the first, Python-written device."""
    from torch.func import grad, jacfwd, jvp

    def f(x):
        return (x.sin() * x).sum()

    def second_derivative_along(x, v):
        return jvp(lambda y: jvp(f, (y,), (v,))[1], (x,), (v,))[1]

    results = {}
    for device in ("cpu", "neuron"):
        x, v = torch.linspace(-1, 1, 5).to(device), torch.ones(5, device=device)
        results[device] = [jacfwd(grad(f))(x).cpu(), second_derivative_along(x, v).cpu()]
    assert all(torch.equal(a, b) for a, b in zip(results["cpu"], results["neuron"], strict=True))


def test_torch_export_traces_a_neuron_model():
    """export's fake tensors read the tensor's storage, which the Python-written device lacked."""
    model = torch.nn.Linear(3, 2).to("neuron")
    program = torch.export.export(model, (torch.randn(1, 3, device="neuron"),))
    x = torch.randn(1, 3, device="neuron")
    assert torch.equal(program.module()(x).cpu(), model(x).cpu())
