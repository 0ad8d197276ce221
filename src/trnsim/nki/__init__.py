"""trnsim's NKI front end: run NKI 0.6 kernels (`nki.jit`, `nki.language`, `nki.isa`) on the CPU.

    import trnsim.nki as nki
    import trnsim.nki.language as nl
    import trnsim.nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ...
        return out

    nki.simulate(add)(x, y)          # numpy/torch/JAX in, same kind out
    nki.trace(add, x, y)             # the instruction trace, no values
"""

from trnsim.nki import isa, language, typing
from trnsim.nki.jit import Kernel, TensorSpec, jit, resolve_target, simulate, trace
from trnsim.nki.language import tile_size
from trnsim.nki.tensor import NkiTensor

dtype = str
"""The type of an NKI dtype (`nl.float32` and the others are their names), for annotations."""

__all__ = ["Kernel", "NkiTensor", "TensorSpec", "dtype", "isa", "jit", "language", "resolve_target",
           "simulate", "tile_size", "trace", "typing"]
