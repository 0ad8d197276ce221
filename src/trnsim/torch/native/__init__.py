"""The neuron device's C++ core (`neuron_device.cpp`), compiled on first use and cached.

The core makes neuron tensors real PyTorch tensors over host memory, so an aten op costs a few
microseconds above CPU instead of the ten or so that Python dispatch costs (docs/torch.md,
"Speed"). It is built with PyTorch's own extension builder (a C++ compiler and ninja), once per
source and torch version, into trnsim's cache directory; the first build takes about a minute,
and later processes import the built module directly.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import shutil
import sys
import sysconfig
from pathlib import Path

import torch

from trnsim.config import cache_directory
from trnsim.errors import UnsupportedError

SOURCE = Path(__file__).with_name("neuron_device.cpp")
NAME = "trnsim_neuron_device"


def build_directory() -> Path:
    """Where the compiled core goes: keyed by the source, the torch version it is built against and
    the Python it is built for (a library built for one does not load in another)."""
    made_for = f"{torch.__version__} {sys.version} {sysconfig.get_config_var('EXT_SUFFIX')}"
    key = hashlib.sha256(SOURCE.read_bytes() + made_for.encode()).hexdigest()[:16]
    return cache_directory() / "torch-native" / key


def missing_tools() -> list[str]:
    """The build tools this machine lacks (empty: the core can be built)."""
    return [tool for tool in ("c++", "ninja") if shutil.which(tool) is None]


@functools.cache
def load():
    """The compiled core as a Python module (built on the first call in a new cache)."""
    folder = build_directory()
    built = folder / f"{NAME}.so"
    # PyTorch's builder holds a `lock` file in the folder while it builds: wait for it through the
    # builder rather than import a half-written library.
    if built.exists() and not (folder / "lock").exists():
        spec = importlib.util.spec_from_file_location(NAME, built)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return _build(folder)


def _build(folder: Path):
    from torch.utils import cpp_extension

    missing = missing_tools()
    if missing:
        raise UnsupportedError(f"the neuron device's C++ core needs {' and '.join(missing)} to build",
                               what="the neuron device", hint="install a C++ compiler (g++) and ninja "
                                                              "(pip install ninja), then run again")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"trnsim: compiling the neuron device's C++ core into {folder} (once, about a minute)",
          file=sys.stderr)
    try:
        return cpp_extension.load(NAME, [str(SOURCE)], build_directory=str(folder),
                                  extra_cflags=["-O2"], verbose=False)
    except (RuntimeError, OSError, ImportError) as error:
        raise UnsupportedError(f"the neuron device's C++ core did not build: {error}",
                               what="the neuron device",
                               hint=f"the compiler's output is in {folder}; a C++17 compiler and the "
                                    "Python headers are needed") from error


def record_ops(on: bool) -> None:
    """Have the core report each op to the profiler (trnsim.torch.profile opens and closes this)."""
    load().set_recording(on)


@contextlib.contextmanager
def unrecorded():
    """Ops run inside are not reported by the core: a compiled graph charges its nodes itself."""
    core = load()
    was = core.recording()
    core.set_recording(False)
    try:
        yield
    finally:
        core.set_recording(was)
