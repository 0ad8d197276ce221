"""One smoke test per private PyTorch API the neuron device relies on (torch is pinned to 2.13.0).

If an upgrade moves or changes one of these, the matching test fails with its name, before the
device breaks in a less obvious way.
"""

import importlib
import io
import subprocess
import sys

import torch

from trnsim.torch import device


def test_torch_is_the_pinned_version():
    assert torch.__version__.split("+")[0] == "2.13.0"


def test_privateuse1_renaming_device_module_and_generated_methods():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.neuron.is_available() and callable(torch.Tensor.neuron)
    assert callable(torch.utils.generate_methods_for_privateuse1_backend)
    assert callable(torch._register_device_module)


def test_composite_and_cpu_kernel_queries_name_the_ops_run_whole():
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    # registered at import: silu_backward, CPU's own kernel next to a composite, now has one on neuron
    assert "silu_backward" not in device.ops_run_whole_on_cpu()
    assert has_kernel("aten::silu_backward", "CompositeImplicitAutograd")
    assert has_kernel("aten::silu_backward", "PrivateUse1")
    assert "allreduce_" in device.collective_ops()
    # the functional wait is a composite: the core gives it a device kernel to be seen
    assert has_kernel("_c10d_functional::wait_tensor", "CompositeExplicitAutograd")


def test_foreach_device_list_and_tensor_reduction_for_other_processes():
    from multiprocessing import reduction

    from torch.multiprocessing import reductions

    optimizer = importlib.import_module("torch.optim.optimizer")
    assert "neuron" not in optimizer._get_foreach_kernels_supported_devices()
    assert callable(reductions.reduce_tensor) and callable(reduction.ForkingPickler.register)


def test_inductor_device_registration_for_cpu_codegen():
    from torch._dynamo.device_interface import CpuInterface, register_interface_for_device
    from torch._inductor.codegen import common
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    assert callable(common.register_backend_for_device) and callable(common.register_device_op_overrides)
    assert callable(register_interface_for_device) and CpuInterface is not None
    assert callable(PythonWrapperCodegen._generate_kernel_call_helper)
    assert callable(PythonWrapperCodegen.create)


def test_autocast_key_and_exclusion_guard():
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        assert torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.AutocastPrivateUse1)
    assert callable(torch.library.fallthrough_kernel)


def test_a_neuron_tensor_saves_and_loads_weights_only():
    buffer = io.BytesIO()
    torch.save(torch.arange(3.0, device="neuron"), buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True).cpu().tolist() == [0.0, 1.0, 2.0]


def test_tensor_str_helpers_accept_custom_contents():
    text = torch._tensor_str._str(torch.ones(2, device="neuron"),
                                  tensor_contents=torch._tensor_str._tensor_str(torch.ones(2), 13))
    assert "device='neuron:0'" in text


def test_fused_attention_chooser_and_mode_disabling():
    q = torch.randn(1, 2, 4, 8)
    choice = torch.ops.aten._fused_sdp_choice(q, q, q, None, 0.0, True)
    assert choice == int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), torch.utils._python_dispatch._disable_current_modes():
        assert type(torch.empty(1)) is torch.Tensor


def test_aot_autograd_backend_helper_and_dynamo_entry_point():
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.registry import lookup_backend

    assert callable(aot_autograd)
    assert lookup_backend("neuron").__name__ == "neuron_backend"


def test_backend_autoload_runs_the_entry_point_on_import_torch():
    code = "import sys, torch; print('trnsim.torch' in sys.modules, torch.neuron.is_available())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]
    env_off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PATH": ""})
    assert "AttributeError" in env_off.stderr


def test_backend_config_maps_devices_and_plugins_are_listed():
    import torch.distributed as dist

    config = dist.distributed_c10d.BackendConfig("cpu:gloo,neuron:gloo")
    assert config.get_device_backend_map() == {"cpu": "gloo", "neuron": "gloo"}
    assert "NEURON" in dist.Backend._plugins
    composite = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    assert torch.equal(torch.ops.aten.clone.default.redispatch(composite, torch.ones(2)), torch.ones(2))


def test_inductor_entry_point_per_graph_compiler_and_aot_cache_switch():
    """torch/inductor.py wraps the object torch.compile calls, passes compile_fx an
    inner_compile, turns AOTAutograd's cache off, and wraps a CompiledFxGraph's callable."""
    import dataclasses
    import inspect

    from torch._functorch import config as functorch_config
    from torch._inductor import compile_fx
    from torch._inductor.output_code import CompiledFxGraph

    assert callable(torch._TorchCompileInductorWrapper.__call__)
    assert "inner_compile" in inspect.signature(compile_fx.compile_fx).parameters
    assert callable(compile_fx.compile_fx_inner)
    assert hasattr(functorch_config, "enable_autograd_cache")
    assert "current_callable" in {field.name for field in dataclasses.fields(CompiledFxGraph)}
