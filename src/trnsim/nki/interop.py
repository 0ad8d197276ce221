"""Kernel arguments in and results out: numpy, torch and JAX arrays to HBM tensors and back.

Results come back as the kind the caller passed (torch in, torch out; tensors on the "neuron"
device come back on it); bool tensors, which NKI stores as bytes, come back as bool. Inputs the kernel wrote
are updated in place, as the official simulator does. torch and JAX are imported only when the
caller passes their arrays.
"""

from __future__ import annotations

from math import prod

import numpy as np

from trnsim.core.memory import check_shape
from trnsim.core.trace import Trace
from trnsim.errors import ConfigError
from trnsim.nki import backend, dtypes
from trnsim.nki.tensor import NkiTensor

# torch dtypes without a numpy twin travel as raw bits of the same width.
_TORCH_BITS = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8",
               "float8_e8m0fnu": "uint8"}


def _kind(value) -> str | None:
    module = type(value).__module__
    if module.startswith(("torch", "trnsim.torch")) and hasattr(value, "detach"):
        return "neuron" if value.device.type == "neuron" else "torch"
    if module.startswith(("jax", "jaxlib")) and hasattr(value, "shape"):
        return "jax"
    if isinstance(value, np.ndarray):
        return "numpy"
    if type(value).__name__ == "TensorSpec":
        return "spec"
    return None


def _to_numpy(value, kind: str) -> np.ndarray:
    if kind in ("torch", "neuron"):
        import torch
        tensor = value.detach().cpu().contiguous()
        name = str(tensor.dtype).rsplit(".", 1)[-1]
        if name in _TORCH_BITS:
            bits = tensor.view(getattr(torch, _TORCH_BITS[name])).numpy()
            return bits.view(dtypes.dtype(name).numpy)
        return tensor.numpy()
    return np.asarray(value)


def to_hbm(args, kwargs, region: str) -> tuple[str, list, dict]:
    """Wrap every array argument as an HBM tensor; other arguments pass through."""
    kinds = {k for k in map(_kind, list(args) + list(kwargs.values())) if k not in (None, "spec")}
    if len(kinds) > 1:
        raise ConfigError(f"kernel arguments mix array kinds {sorted(kinds)}", hint="pass one kind")
    kind = kinds.pop() if kinds else "numpy"
    place = dtypes.REGIONS[region]

    def convert(value, name: str):
        which = _kind(value)
        if which is None:
            return value
        if which == "spec":
            return backend.new_tensor(value.shape, value.dtype, place, name, kernel_made=False)
        if which != "numpy":  # torch and JAX arrays are copied to the host: check the size first
            _check_fits(value, name)
        array = _to_numpy(value, which)
        return backend.new_tensor(array.shape, array.dtype, place, name, values=array, kernel_made=False)

    hbm_args = [convert(v, f"arg{i}") for i, v in enumerate(args)]
    hbm_kwargs = {k: convert(v, k) for k, v in kwargs.items()}
    return kind, hbm_args, hbm_kwargs


def _check_fits(value, name: str) -> None:
    """Refuse a torch/JAX array HBM cannot hold before it is copied (an expanded 1 TiB view costs
    a few bytes until then)."""
    shape = tuple(int(size) for size in value.shape)
    item_bytes = value.element_size() if hasattr(value, "element_size") else np.dtype(value.dtype).itemsize
    check_shape(shape, f"tensor {name!r}")
    hbm = backend.core().memory.hbm
    if hbm is not None:
        hbm.check(prod(shape) * item_bytes, name)


def write_back(args, hbm_args, trace: Trace, with_values: bool) -> None:
    """Copy HBM inputs the kernel wrote back into the caller's arrays."""
    if not with_values:
        return
    written = {region.buffer for ins in trace for region in ins.outputs}
    for original, tensor in zip(args, hbm_args, strict=True):
        if isinstance(tensor, NkiTensor) and tensor.storage.id in written:
            values = tensor.array()
            kind = _kind(original)
            if kind == "numpy" and original.flags.writeable:
                original[...] = values
            elif kind in ("torch", "neuron"):
                original.copy_(_to_torch(values))


def _to_torch(values: np.ndarray):
    import torch
    name = values.dtype.name
    if name in _TORCH_BITS:
        bits = np.ascontiguousarray(values).view(_TORCH_BITS[name])
        return torch.from_numpy(bits).view(getattr(torch, name))
    if name == "float8_e4m3":
        raise ConfigError("torch has no float8_e4m3 (legacy E4M3) dtype", hint="return float32 or bf16")
    return torch.from_numpy(np.ascontiguousarray(values))


def from_hbm(result, kind: str, handed: set[int] | None = None):
    """Kernel results (tensors, or tuples/lists/dicts of them) as arrays of the caller's kind.

    `handed` holds the ids of buffers the kernel made whose memory nothing else can see (a
    kernel-made HBM output): the first result that covers one whole is returned without a copy."""
    handed = set() if handed is None else handed
    if isinstance(result, NkiTensor):
        values = result.array()
        storage = result.storage
        if storage.id in handed and values.flags.c_contiguous and values.nbytes == storage.data.nbytes:
            handed.discard(storage.id)  # a second result on the same buffer gets its own copy
        else:
            values = np.array(values)
        if result.element.name == "bool_":
            values = values.astype(np.bool_)
        if kind == "torch":
            return _to_torch(values)
        if kind == "neuron":  # tensors on trnsim's torch device come back on it
            return _to_torch(values).to("neuron")
        if kind == "jax":
            import jax.numpy as jnp
            return jnp.asarray(values)
        return values
    if isinstance(result, tuple | list):
        return type(result)(from_hbm(r, kind, handed) for r in result)
    if isinstance(result, dict):
        return {k: from_hbm(v, kind, handed) for k, v in result.items()}
    return result


def flatten(result) -> list:
    if isinstance(result, tuple | list):
        return [leaf for item in result for leaf in flatten(item)]
    if isinstance(result, dict):
        return [leaf for item in result.values() for leaf in flatten(item)]
    return [result]
