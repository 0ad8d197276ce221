"""`nki.language` (nl): tensor creation, data movement, loops, SPMD ids, debug, tile sizes, dtypes.

The math, activations and reductions live in language_math.py and are re-exported here. Each
`nl` call is a convenience over one or a few `nisa` instructions, as in NKI 0.6.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import os
from numbers import Integral

import numpy as np

from trnsim import hardware
from trnsim.core.isa import Memory
from trnsim.errors import ArgumentError, ShapeError, SourceLoc, UnsupportedError
from trnsim.nki import backend, calls, dtypes
from trnsim.nki import isa as nisa
from trnsim.nki.objects import NKIObject  # noqa: F401 - nl.NKIObject
from trnsim.nki.registers import VirtualRegister
from trnsim.nki.tensor import DynSlice, NkiTensor
from trnsim.nki.tensor import axis_index as _axis_index

# --- dtypes and memory regions --------------------------------------------------------------------
bool_, int8, int16, int32 = "bool_", "int8", "int16", "int32"
uint8, uint16, uint32 = "uint8", "uint16", "uint32"
float16, float32, bfloat16, tfloat32 = "float16", "float32", "bfloat16", "tfloat32"
float8_e4m3, float8_e5m2, float8_e4m3fn, float8_e8m0fnu = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn",
                                                            "float8_e8m0fnu")
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4"

sbuf, psum, hbm = dtypes.SBUF, dtypes.PSUM, dtypes.HBM
shared_hbm, private_hbm = dtypes.SHARED_HBM, dtypes.PRIVATE_HBM
MemoryRegion = dtypes.MemoryRegion


def is_psum(buffer) -> bool:
    return dtypes.region(buffer).memory is Memory.PSUM


def is_sbuf(buffer) -> bool:
    return dtypes.region(buffer).memory is Memory.SBUF


def is_hbm(buffer) -> bool:
    return dtypes.region(buffer).memory is Memory.HBM


def is_on_chip(buffer) -> bool:
    return not is_hbm(buffer)


# --- tile sizes -----------------------------------------------------------------------------------
class _TileSize:
    """`nl.tile_size`: limits of the target the running kernel (or the default target) uses."""

    @staticmethod
    def _core():
        from trnsim.nki.jit import resolve_target
        running = backend._active.get()
        return running.spec if running is not None else hardware.core(resolve_target())

    pmax = property(lambda self: self._core().partitions)
    gemm_stationary_fmax = property(lambda self: self._core().matmul_max_stationary_free)
    gemm_moving_fmax = property(lambda self: self._core().matmul_max_moving_free)
    bn_stats_fmax = property(lambda self: self._core().bn_stats_max_free)
    psum_num_banks = property(lambda self: self._core().psum_banks)
    psum_bank_fmax_bytes = property(lambda self: self._core().psum_bank_bytes)
    psum_bank_fmax = property(lambda self: self._core().psum_bank_bytes // np.dtype(np.float32).itemsize)
    psum_fmax = psum_bank_fmax
    sbuf_fmax_bytes = property(lambda self: self._core().sbuf_bytes_per_partition)
    sbuf_fmax = property(lambda self: self._core().sbuf_bytes_per_partition // np.dtype(np.float32).itemsize)
    total_available_sbuf_size = sbuf_fmax_bytes
    sbuf_size_bytes = property(lambda self: self._core().sbuf_bytes)

    @property
    def psum_min_align(self):
        raise UnsupportedError("nl.tile_size.psum_min_align: the hardware catalog has no sourced value",
                               what="nl.tile_size.psum_min_align")

    @property
    def sbuf_min_align(self):
        raise UnsupportedError("nl.tile_size.sbuf_min_align: the hardware catalog has no sourced value",
                               what="nl.tile_size.sbuf_min_align")


tile_size = _TileSize()


# --- creation -------------------------------------------------------------------------------------
def ndarray(shape, dtype, buffer=sbuf, name: str = "", address=None) -> NkiTensor:
    return backend.new_tensor(shape, dtype, buffer, name, _address(address))


def _address(address):
    """NKI takes a byte address or (base partition, byte address)."""
    if address is None:
        return None
    parts = list(address) if isinstance(address, tuple | list) else [address]
    integers = builtins.all(isinstance(part, Integral) and not isinstance(part, bool) for part in parts)
    if not 1 <= len(parts) <= 2 or not integers:
        raise ArgumentError(f"address={address!r}; it is a byte address or (base partition, byte address), "
                            "integers", op="nl.ndarray")
    return (int(parts[0]), int(parts[-1])) if len(parts) > 1 else int(parts[0])


def full(shape, fill_value, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    tile = ndarray(shape, dtype, buffer, name)
    if isinstance(fill_value, bool | np.bool_):  # True/False fill a bool_ (or any) tile with 1/0
        fill_value = int(fill_value)
    nisa.memset(dst=tile, value=fill_value)
    return tile


def zeros(shape, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    return full(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=sbuf, name: str = "") -> NkiTensor:
    return full(shape, 1, dtype, buffer, name)


def empty_like(x, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return ndarray(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def zeros_like(x, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return zeros(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def ones_like(x, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return ones(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def full_like(x, fill_value, dtype=None, buffer=None, name: str = "") -> NkiTensor:
    return full(x.shape, fill_value, dtype or x.dtype, buffer or x.buffer, name)


def rand(shape, dtype=float32, buffer=sbuf, name: str = "") -> NkiTensor:
    tile = ndarray(shape, dtype, buffer, name)
    nisa.rng(dst=tile)
    return tile


def random_seed(seed) -> None:
    nisa.set_rng_seed(seed)


def shared_constant(constant, dtype=None) -> NkiTensor:
    """A copy of `constant` in shared HBM: the kernel's tensor never aliases the caller's array.
    `constant` is an array or, as NKI also takes, the path of a `.npy` file."""
    if isinstance(constant, str | os.PathLike):
        constant = _load_npy(constant)
    values = np.array(constant, dtypes.dtype(dtype).numpy if dtype is not None else None)
    return backend.new_tensor(values.shape, values.dtype, shared_hbm, "constant", values=values)


def _load_npy(path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ArgumentError(f"nl.shared_constant({os.fspath(path)!r}): not a readable .npy file ({error})",
                            hint="pass an array, or the path of a file np.save wrote") from None


def shared_identity_matrix(n: int, dtype=uint8, dst=None) -> NkiTensor:
    """An n x n identity built on chip: ones where partition == column."""
    ones_tile = ones((n, n), dtype)
    out = dst if dst is not None else ndarray((n, n), dtype)
    nisa.affine_select(dst=out, pattern=[[-1, n]], channel_multiplier=1, on_true_tile=ones_tile,
                       on_false_value=0, cmp_op="equal")
    return out


# --- data movement ----------------------------------------------------------------------------------
def load(src, dtype=None) -> NkiTensor:
    tile = ndarray(src.shape, dtype or src.dtype, sbuf)
    nisa.dma_copy(dst=tile, src=src)
    return tile


def store(dst, value):
    nisa.dma_copy(dst=dst, src=value)
    return dst


def load_transpose2d(src, dtype=None) -> NkiTensor:
    """A DMA transpose into SBUF; dma_transpose does not cast, so another `dtype` is a copy after."""
    tile = ndarray(tuple(reversed(src.shape)), src.dtype, sbuf)
    nisa.dma_transpose(dst=tile, src=src)
    return tile if dtype is None or dtype == src.dtype else copy(tile, dtype)


def copy(x, dtype=None) -> NkiTensor:
    tile = ndarray(x.shape, dtype or x.dtype, sbuf)
    nisa.tensor_copy(dst=tile, src=x, engine=nisa.engine.vector)
    return tile


def matmul(x, y, transpose_x: bool = False) -> NkiTensor:
    """x @ y into a new fp32 PSUM tile; x is [K, M] already when transpose_x=True."""
    stationary = x if transpose_x else transpose(x)
    out = ndarray((stationary.shape[1], y.shape[1]), float32, psum)
    nisa.nc_matmul(dst=out, stationary=stationary, moving=y)
    return out


def transpose(x, dtype=None) -> NkiTensor:
    """[P, F] -> [F, P] through the PE array (or the Vector engine for tiles up to 32 x 32), into
    PSUM as fp32; integers and packed types are moved as they are (their bits pass the transpose),
    since fp32 holds int32 values exactly only up to 2^24."""
    rows, cols = x.shape[0], math.prod(x.shape[1:])
    small = builtins.max(rows, cols) <= tile_size.pmax // 4
    as_bits = dtypes.dtype(x.dtype).numpy.kind in "iub"
    staged = ndarray((cols, rows), x.dtype if as_bits else float32, psum)
    nisa.nc_transpose(dst=staged, data=x, engine=nisa.engine.vector if small else nisa.engine.tensor)
    return copy(staged, dtype or x.dtype)


def broadcast_to(x, shape, dtype=None) -> NkiTensor:
    return copy(x.broadcast_to(tuple(shape) if isinstance(shape, tuple | list) else (shape,)), dtype)


def expand_dims(x, axis) -> NkiTensor:
    if isinstance(axis, tuple | list):
        raise ArgumentError(f"axis={axis!r}; nl.expand_dims inserts one axis (an integer)")
    return x.expand_dim(axis)


def ds(start, size: int, step: int = 1) -> DynSlice:
    return DynSlice(start, size, step)


def gather_flattened(data, indices, axis: int = 0, dtype=None) -> NkiTensor:
    """Per partition, out[p, ...] = flattened data[p][indices[p, ...]] (a GpSimd gather)."""
    out = ndarray(indices.shape, data.dtype, sbuf)
    nisa.nc_n_gather(dst=out, data=data, indices=indices)
    return out if dtype is None or dtypes.dtype(dtype).name == data.dtype else copy(out, dtype)


# --- loops and control flow ---------------------------------------------------------------------
def affine_range(start, stop=None, step=1) -> range:
    return _range("nl.affine_range", start, stop, step)


sequential_range = static_range = affine_range


def dynamic_range(start, stop=None, step=1):
    return _range("nl.dynamic_range", start, stop, step)


def fori_loop(lower, upper, body_fun, step=1):
    """Run body_fun(i) for each i; the loop variable is a read-only register."""
    for i in _range("nl.fori_loop", lower, upper, step):
        body_fun(VirtualRegister(i))


def while_loop(init, body_fun):
    """r = init; while r != 0: r = body_fun(r) — the body returns the next condition register."""
    condition = init
    while _int(condition, "nl.while_loop's condition") != 0:
        condition = body_fun(condition)


def _range(what: str, start, stop, step) -> range:
    """range(start, stop, step) of integers or registers (their values now)."""
    start, stop = (0, start) if stop is None else (start, stop)
    bounds = [_int(value, what) for value in (start, stop, step)]
    if bounds[2] == 0:
        raise ArgumentError(f"{what}: step is 0", where=SourceLoc.of_caller())
    return range(*bounds)


def _int(value, what: str = "an index") -> int:
    """An integer, or the value a register holds now."""
    if isinstance(value, VirtualRegister):
        return value.read_value()
    if type(value) is bool or not isinstance(value, int | np.integer):
        raise ArgumentError(f"{what} takes integers or registers, not {value!r}", where=SourceLoc.of_caller())
    return int(value)


@contextlib.contextmanager
def no_reorder():
    yield


# --- SPMD and debug -----------------------------------------------------------------------------
def program_id(axis: int = 0) -> int:
    """This program's index along `axis` of the launch grid (0 without a grid)."""
    running = backend.core()
    return int(np.unravel_index(running.program_id, running.grid or (1,))[_grid_axis(axis, running.grid)])


def num_programs(axes: int = 0) -> int:
    """Programs along `axes` of the launch grid (1 without a grid), each axis counted once."""
    grid = backend.core().grid
    dims = [_grid_axis(axis, grid) for axis in (axes if isinstance(axes, tuple | list) else (axes,))]
    if len(set(dims)) != len(dims):
        raise ShapeError(f"axes {axes!r} of {_launch_grid(grid)}: an axis is named twice")
    return math.prod((grid or (1,))[dim] for dim in dims)


def _grid_axis(axis, grid: tuple) -> int:
    """`axis` as an index into the grid's dims; a launch without a grid has one, axis 0 (one program)."""
    return _axis_index(axis, len(grid) or 1, f"axis {axis!r} of {_launch_grid(grid)}")


def _launch_grid(grid: tuple) -> str:
    return f"the launch grid {list(grid)}" if grid else "a launch without a grid (axis 0 only)"


def program_ndim() -> int:
    """Dimensions of the launch grid: 0 for a plain launch."""
    return len(backend.core().grid)


def device_print(prefix, tensor=None) -> None:
    """Print a tensor's values (simulate) or its shape and dtype (trace_only)."""
    running = backend.core()
    if tensor is None:
        print(prefix)
    elif running.with_values and isinstance(tensor, NkiTensor):
        print(prefix, np.asarray(tensor.array()))
    else:
        print(prefix, tensor)


# Names of the old neuronxcc.nki API (NKI beta 1, SDK 2.20-2.26) that NKI 0.6 no longer has.
OLD_API = {"arange": "slicing or nl.ds", "mgrid": "slicing or nl.ds", "par_dim": "plain shapes",
           "static_cast": "nisa.tensor_copy into a tile of the new dtype",
           "loop_reduce": "nisa.tensor_reduce",
           "atomic_rmw": "nisa.dma_compute", "spmd_dim": "kernel[n] launch grids", "nc": "kernel[2] (LNC=2)",
           "finfo": "numpy.finfo", "all_reduce": "nki.collectives"}


# Names nki-library uses that the NKI 0.6 reference does not list (`nl.bool` in a dtype helper,
# `nl.range` as a loop): module attributes only, so this module's own `bool` and `range` stay Python's.
_UNLISTED = {"bool": "bool_", "range": "affine_range"}


def __getattr__(name: str):
    if name in _UNLISTED:
        return globals()[_UNLISTED[name]]
    if name in OLD_API:
        raise UnsupportedError(f"nl.{name} belongs to the old neuronxcc.nki API; trnsim emulates NKI 0.6",
                               what=f"nl.{name}", hint=f"use {OLD_API[name]}", where=SourceLoc.of_caller())
    raise AttributeError(f"module 'nki.language' has no attribute {name!r}")


from trnsim.nki.language_math import *  # noqa: E402, F401, F403 - the math half of nl

calls.checked_calls(globals(), "nl", calls.NL_ARGUMENTS)
