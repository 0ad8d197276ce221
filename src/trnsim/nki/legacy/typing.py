"""`neuronxcc.nki.typing` (nt): `nt.tensor[[8192, 4096], nl.bfloat16]` is a tensor of that shape
and dtype without values (a `TensorSpec`): kernels called with them are traced and timed only, as
the tutorials' benchmarks do. Any other subscript is a plain annotation, as in trnsim.nki.typing."""

from __future__ import annotations

from trnsim.nki.jit import TensorSpec
from trnsim.nki.typing import mutable_tensor, scalar  # noqa: F401 - shared with the 0.6 module


class _Tensor:
    def __getitem__(self, item):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], list | tuple):
            from trnsim.nki import dtypes
            return TensorSpec(tuple(item[0]), dtypes.dtype(item[1]).name)
        return self

    def __call__(self, *args, **kwargs):
        return self


tensor = _Tensor()
