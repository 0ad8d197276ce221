"""PyTorch on `torch.device("neuron")`: an emulated NeuronCore as a PyTorch device.

    import torch, trnsim.torch
    x = torch.randn(4, 4, device="neuron")
    with trnsim.torch.profile(target="trn2") as prof:
        y = (x @ x).relu()
    print(y.cpu(), prof.total_s)

Importing this module registers the device; installing trnsim also registers it on `import torch`
through PyTorch's backend autoload (set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to turn that off).
"""

# ruff: noqa: E402  (the imports follow `autoload` on purpose; see its docstring)
from __future__ import annotations


def autoload() -> None:
    """Entry point of PyTorch's `torch.backends` group: importing this module does the work.

    Defined before anything imports torch: when trnsim.torch is imported first, `import torch`
    below runs the autoload entry points, which look this name up on the half-imported module.
    """


import torch  # noqa: F401  (imported after `autoload` on purpose, see above)

from trnsim.torch import device as _device
from trnsim.torch import distributed as _distributed
from trnsim.torch.errors import DeviceMismatchError
from trnsim.torch.fallback import FallbackWarning
from trnsim.torch.fallback import counts as fallback_counts
from trnsim.torch.fallback import reset as reset_fallback_counts
from trnsim.torch.inductor import ProfileWarning
from trnsim.torch.nki_bridge import nki_call
from trnsim.torch.profiler import Profile, Report, profile
from trnsim.torch.tensor import buffer_of, is_neuron, to_neuron

__all__ = [
    "DeviceMismatchError",
    "FallbackWarning",
    "Profile",
    "ProfileWarning",
    "Report",
    "buffer_of",
    "fallback_counts",
    "is_neuron",
    "nki_call",
    "profile",
    "reset_fallback_counts",
    "to_neuron",
]


# Registrations live as long as their torch.library objects, so the module keeps them.
_LIBRARIES = _device.register()
_distributed.register()
