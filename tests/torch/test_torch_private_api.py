"""One smoke test per private PyTorch API the neuron device relies on (torch is pinned to 2.13.0).

If an upgrade moves or changes one of these, the matching test fails with its name, before the
device breaks in a less obvious way.
"""

import io
import pickle
import subprocess
import sys

import torch

import trnsim.torch
from trnsim.torch import device


def test_torch_is_the_pinned_version():
    assert torch.__version__.split("+")[0] == "2.13.0"


def test_python_privateuse1_backend_setup_exists_with_its_hooks_and_guard():
    from torch.utils import backend_registration

    assert callable(backend_registration._setup_privateuseone_for_python_backend)
    assert issubclass(backend_registration._DummyPrivateUse1Hook, torch._C._acc.PrivateUse1Hooks)
    assert issubclass(backend_registration._DummyDeviceGuard, torch._C._acc.DeviceGuard)
    assert torch._C._get_privateuse1_backend_name() == "neuron"


def test_wrapper_subclass_constructor_and_disabled_torch_function():
    x = torch.Tensor._make_wrapper_subclass(trnsim.torch.NeuronTensor, (2, 3), strides=(3, 1),
                                            dtype=torch.float32, device=torch.device("neuron", 0))
    assert x.shape == (2, 3) and x.device.type == "neuron"
    assert callable(torch._C._disabled_torch_function_impl)


def test_metas_set_kernel_grows_a_wrappers_data_less_storage():
    """How a neuron tensor grows in place (trnsim.torch.ops._sync_layout)."""
    x = torch.Tensor._make_wrapper_subclass(trnsim.torch.NeuronTensor, (2,), dtype=torch.float32,
                                            device=torch.device("neuron", 0))
    storage = torch.Tensor.untyped_storage(x)
    meta = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(meta, x, storage, 1, (3, 4), (4, 1))
    assert x.shape == (3, 4) and x.storage_offset() == 1
    assert torch.Tensor.untyped_storage(x).nbytes() == 13 * 4


def test_factory_ops_are_found_by_schema_and_composite_overrides_exist():
    names = {op._schema.name for op in device.factory_overloads()}
    assert {"aten::empty", "aten::zeros", "aten::randn", "aten::arange", "aten::empty_strided"} <= names
    assert "silu_backward" in device.composite_ops_with_cpu_kernels()
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::silu_backward", "CompositeImplicitAutograd")


def test_autocast_key_and_exclusion_guard():
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        assert torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.AutocastPrivateUse1)
    assert callable(torch.library.fallthrough_kernel)


def test_rebuild_function_is_allowed_by_weights_only_load():
    buffer = io.BytesIO()
    torch.save(torch.arange(3.0, device="neuron"), buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True).cpu().tolist() == [0.0, 1.0, 2.0]
    reduced = trnsim.torch.NeuronTensor(torch.ones(1)).__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    assert reduced[0] is torch._utils._rebuild_device_tensor_from_cpu_tensor


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
