"""The neuron device's C++ core (`neuron_device.cpp`), compiled on first use and cached.

The core makes neuron tensors real PyTorch tensors over host memory, so an aten op costs a few
microseconds above CPU instead of the ten or so that Python dispatch costs (docs/torch.md,
"Speed"). It is built with PyTorch's own extension builder (a C++ compiler and ninja), once per
source and torch version, into trnsim's cache directory; the first build takes about a minute.

It is not yet the default device: TRNSIM_TORCH_NATIVE=1 registers it instead of the Python one
(`trnsim.torch.native.device`), with the parts listed in docs/torch.md.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import shutil
import sys
from pathlib import Path

import torch

from trnsim.config import cache_directory, env_flag
from trnsim.errors import UnsupportedError

SOURCE = Path(__file__).with_name("neuron_device.cpp")


def selected() -> bool:
    """Whether this process registers the neuron device on the C++ core (TRNSIM_TORCH_NATIVE=1)."""
    return env_flag("TRNSIM_TORCH_NATIVE")


def build_directory() -> Path:
    """Where the compiled core goes: keyed by the source and the torch version it is built against."""
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:16]
    return cache_directory() / "torch-native" / key


def missing_tools() -> list[str]:
    """The build tools this machine lacks (empty: the core can be built)."""
    return [tool for tool in ("c++", "ninja") if shutil.which(tool) is None]


@functools.cache
def load():
    """The compiled core as a Python module (built on the first call in a new cache)."""
    from torch.utils import cpp_extension

    missing = missing_tools()
    if missing:
        raise UnsupportedError(f"the neuron device's C++ core needs {' and '.join(missing)} to build",
                               what="TRNSIM_TORCH_NATIVE=1",
                               hint="install a C++ compiler and ninja (pip install ninja), or unset "
                                    "TRNSIM_TORCH_NATIVE to use the Python device")
    folder = build_directory()
    folder.mkdir(parents=True, exist_ok=True)
    if not any(folder.glob("*.so")):
        print(f"trnsim: compiling the neuron device's C++ core into {folder} (once, about a minute)",
              file=sys.stderr)
    return cpp_extension.load("trnsim_neuron_device", [str(SOURCE)], build_directory=str(folder),
                              extra_cflags=["-O2"], verbose=False)


def record_ops(on: bool) -> None:
    """Have the core report each op to the profiler (trnsim.torch.profile opens and closes this)."""
    if selected():
        load().set_recording(on)


@contextlib.contextmanager
def unrecorded():
    """Ops run inside are not reported by the core: a compiled graph charges its nodes itself."""
    if not selected():
        yield
        return
    core = load()
    was = core.recording()
    core.set_recording(False)
    try:
        yield
    finally:
        core.set_recording(was)
