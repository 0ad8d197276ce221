"""The C++ core of the neuron device (TRNSIM_TORCH_NATIVE=1), run in a process of its own since a
process registers one device core. The core is compiled once per cache (about a minute)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trnsim.torch import native

pytestmark = pytest.mark.skipif(bool(native.missing_tools()),
                                reason=f"building the C++ core needs {native.missing_tools()}")

SCRIPT = r"""
import copy, json, sys
import torch
from torch.nn import functional as F
import trnsim, trnsim.torch

sys.path.insert(0, TESTS)
from torch_gpt import GPT, batches, train

found = {}
x, y = torch.randn(8, 8), torch.randn(8, 8)
a, b = x.to("neuron"), y.to("neuron")
found["device"] = str(a.device)
found["ops_equal_cpu"] = all(torch.equal(n.cpu(), c) for n, c in [
    (a + b, x + y), (a @ b, x @ y), (a.softmax(-1), x.softmax(-1)), (a.sum(0), x.sum(0)),
    (torch.where(a > 0, a, b), torch.where(x > 0, x, y)), (a[torch.tensor([1, 3])], x[[1, 3]]),
    (a[torch.tensor([1, 3], device="neuron")], x[[1, 3]])])

low = torch.randn(256, 256).bfloat16()  # TensorE's rule: fp32 products and sums, rounded once
found["bf16_matmul_accumulates_in_fp32"] = torch.equal((low.to("neuron") @ low.to("neuron")).cpu(),
                                                       (low.float() @ low.float()).bfloat16())
z = torch.randn(4, dtype=torch.complex64)
found["lazy_conj_and_neg"] = [torch.equal((z.to("neuron").conj() * 2).cpu(), z.conj() * 2),
                              torch.equal(z.to("neuron").conj().cpu(), z.conj()),
                              torch.equal(torch.neg(z.to("neuron").conj()).cpu(), -z.conj())]
view = a.view(64)  # a view shares the tensor's memory
view[3] = 5.0
found["view_writes_through"] = a[0, 3].item() == 5.0
out = torch.empty(0, device="neuron")  # out= of another shape grows the tensor, as on CPU
torch.mul(a, b, out=out)
found["out_resized"] = [list(out.shape), torch.equal(out.cpu(), a.cpu() * y)]

generator = torch.Generator(device="neuron").manual_seed(7)
cpu_generator = torch.Generator().manual_seed(7)
found["generator_draws_like_cpu"] = torch.equal(
    torch.randn(5, device="neuron", generator=generator).cpu(), torch.randn(5, generator=cpu_generator))

before = torch.neuron.memory_allocated()
held = torch.empty(1000, device="neuron")
found["memory_counted"] = torch.neuron.memory_allocated() - before
del held
found["memory_freed"] = torch.neuron.memory_allocated() == before

try:
    a + torch.ones(8, 8)
except trnsim.torch.DeviceMismatchError:
    found["cpu_tensor_refused"] = True
try:
    torch.zeros(2, device=f"neuron:{torch.neuron.device_count()}")
except trnsim.UnsupportedError:
    found["missing_index_refused"] = True
found["stream_device"] = str(torch.neuron.Stream().device)
with trnsim.torch.profile() as prof:
    (a @ b).relu()
found["profiled"] = sorted(op for op, _, _ in prof.counts)
torch.kthvalue(a[0], 2)
found["fallbacks"] = trnsim.torch.fallback_counts()
q = torch.randn(2, 4, 12, 16)
with torch.inference_mode():
    neuron_attention = F.scaled_dot_product_attention(*(q.to("neuron"),) * 3, is_causal=True).cpu()
found["inference_attention_is_cpus"] = torch.equal(neuron_attention, F.scaled_dot_product_attention(
    q, q, q, is_causal=True))

torch.manual_seed(0)
model = GPT(vocab=64, d_model=32, layers=2, heads=4, seq=16)
data = batches(3, batch=2, seq=16, vocab=64)
cpu_losses = train(copy.deepcopy(model), data, steps=6, device="cpu")
neuron_model = copy.deepcopy(model).to("neuron")
found["tied_weights_stay_tied"] = neuron_model.head.weight is neuron_model.tok.weight
found["gpt_bitwise_equal"] = train(neuron_model, data, steps=6, device="neuron") == cpu_losses
print(json.dumps(found))
"""


def test_the_cpp_core_gives_cpu_results_on_real_neuron_tensors():
    env = {**os.environ, "TRNSIM_TORCH_NATIVE": "1"}
    script = SCRIPT.replace("TESTS", repr(str(Path(__file__).parent)))
    process = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                             timeout=600)
    assert process.returncode == 0, process.stderr
    found = json.loads(process.stdout.strip().splitlines()[-1])
    assert found == {
        "device": "neuron:0", "ops_equal_cpu": True, "lazy_conj_and_neg": [True, True, True],
        "bf16_matmul_accumulates_in_fp32": True,
        "view_writes_through": True,
        "out_resized": [[8, 8], True], "generator_draws_like_cpu": True,
        "memory_counted": 4000, "memory_freed": True, "cpu_tensor_refused": True,
        "missing_index_refused": True, "stream_device": "neuron:0",
        "profiled": ["aten.mm.default", "aten.relu.default"],
        "fallbacks": {"aten.kthvalue.values": 1}, "inference_attention_is_cpus": True,
        "tied_weights_stay_tied": True, "gpt_bitwise_equal": True,
    }
