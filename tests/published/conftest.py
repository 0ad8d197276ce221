"""The `kernels` fixture: published kernel sources with the `nki` aliases on."""

import sys

import pytest
from kernel_sources import NKILIB_ROOT, KernelSources, published_root

import trnsim.nki.compat


@pytest.fixture(scope="module")
def kernels():
    """Kernel sources, with the `nki` aliases on for the module's tests."""
    root = published_root()
    saved_path = list(sys.path)
    sys.path.insert(0, str(root / NKILIB_ROOT))
    with trnsim.nki.compat.enabled():
        yield KernelSources(root)
    sys.path[:] = saved_path
    for name in [n for n in sys.modules if n == "nkilib" or n.startswith(("nkilib.", "published_"))]:
        del sys.modules[name]
