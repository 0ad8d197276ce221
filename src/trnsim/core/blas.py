"""numpy's OpenBLAS as the emulator uses it: one thread while a kernel runs, and a GEMM that
writes or adds into PSUM in place.

Why one thread: BLAS sums a GEMM's contraction in an order that depends on how many threads
share the call (and on the call's shape), so the last fp32 bits of an nc_matmul would depend on
the thread count. Kernels run with one BLAS thread (nki/jit.py), so every mode computes each
matmul with the same call and the same bits; the cores are used by running independent matmul
chains side by side instead (core/deferred.py, `started_threads` of them). One thread also keeps
instruction-sized GEMMs (128 x 128 x 512) from synchronising threads on every call, which costs
up to 100x the arithmetic when other processes keep every core busy (measured on a loaded 2-core
machine: 26 ms vs 0.24 ms per instruction). Where the library cannot be found (not Linux,
another BLAS) nothing changes.

`gemm` calls the library's sgemm directly so that a matmul accumulating into PSUM is one BLAS call
with beta = 1 (C = C + A.T @ B: each product is summed in registers, then added to C once, the
order PSUM accumulation has) instead of a product array and a second pass to add it.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class _Library:
    """The OpenBLAS entry points trnsim calls."""

    set_threads: Callable
    get_threads: Callable
    sgemm: Callable | None  # cblas_sgemm with argtypes set, or None where it is not exported
    started_threads: int  # the thread count when trnsim first looked: what numpy's a @ b uses
    config: str  # OpenBLAS's own description: version and the CPU kernels it chose


# Symbol names by build: numpy's wheels ship scipy-openblas with 64-bit integers and a prefix.
_NAMINGS = (("scipy_openblas", "scipy_cblas", "64_", ctypes.c_int64),
            ("openblas", "cblas", "64_", ctypes.c_int64), ("openblas", "cblas", "", ctypes.c_int))


@functools.cache
def _openblas() -> _Library | None:
    """The OpenBLAS numpy loaded, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        library = ctypes.CDLL(path)
        for prefix, cblas, suffix, integer in _NAMINGS:
            setter = getattr(library, f"{prefix}_set_num_threads{suffix}", None)
            getter = getattr(library, f"{prefix}_get_num_threads{suffix}", None)
            if setter is not None and getter is not None:
                sgemm = _sgemm(getattr(library, f"{cblas}_sgemm{suffix}", None), integer)
                return _Library(setter, getter, sgemm, getter(), _config(library, prefix, suffix))
    return None


def _config(library, prefix: str, suffix: str) -> str:
    function = getattr(library, f"{prefix}_get_config{suffix}", None)
    if function is None:
        return "OpenBLAS"
    function.restype = ctypes.c_char_p
    return " ".join(function().decode(errors="replace").split())


def describe() -> str:
    """The BLAS numpy uses as OpenBLAS reports it (version, the CPU kernels it chose), for benchmark
    reports: OPENBLAS_CORETYPE or CPU detection can change numpy's GEMM speed by 2x."""
    library = _openblas()
    return library.config if library is not None else f"not OpenBLAS ({np.__version__} numpy)"


def _sgemm(function, integer) -> Callable | None:
    if function is not None:
        enum, pointer, single = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
        function.argtypes = [enum, enum, enum, integer, integer, integer, single, pointer, integer,
                             pointer, integer, single, pointer, integer]
        function.restype = None
    return function


_ROW_MAJOR, _NO_TRANSPOSE, _TRANSPOSE = 101, 111, 112  # the CBLAS enum values


def gemm(stationary: np.ndarray, moving: np.ndarray, out: np.ndarray, add: bool) -> None:
    """out = stationary.T @ moving, or out += stationary.T @ moving when `add` (all fp32 2-D:
    [K, M], [K, N], [M, N]). One sgemm call when the layouts allow it, else numpy. Inside a
    `queued` block the call is only recorded, to be made later by `run_queued`."""
    calls = _queued.get()
    if calls is not None:
        calls.append((stationary, moving, out, add))
    else:
        _multiply(stationary, moving, out, add)


_queued: contextvars.ContextVar[list | None] = contextvars.ContextVar("trnsim_queued_gemms", default=None)


@contextlib.contextmanager
def queued(calls: list):
    """Inside the block, `gemm` appends its arguments to `calls` instead of multiplying: core/
    deferred.py does a matmul's bookkeeping on the kernel's thread and its arithmetic on a worker."""
    token = _queued.set(calls)
    try:
        yield
    finally:
        _queued.reset(token)


def run_queued(calls: list) -> None:
    """Make the recorded `gemm` calls, in order: the same calls, so the same bits."""
    for call in calls:
        _multiply(*call)


def _multiply(stationary: np.ndarray, moving: np.ndarray, out: np.ndarray, add: bool) -> None:
    library = _openblas()
    rows = [_blas_rows(a) for a in (stationary, moving, out)]
    if library is None or library.sgemm is None or None in rows or 0 in out.shape or stationary.shape[0] == 0:
        product = stationary.T @ moving
        if add:
            np.add(out, product, out=out)
        else:
            out[...] = product
        return
    (k, m), n = stationary.shape, moving.shape[1]
    library.sgemm(_ROW_MAJOR, _TRANSPOSE, _NO_TRANSPOSE, m, n, k, 1.0, stationary.ctypes.data, rows[0],
                  moving.ctypes.data, rows[1], 1.0 if add else 0.0, out.ctypes.data, rows[2])


def _blas_rows(array: np.ndarray) -> int | None:
    """The leading dimension BLAS needs for a row-major fp32 matrix view, or None if it is not one."""
    if array.dtype != np.float32 or array.ndim != 2:
        return None
    row_stride, column_stride = array.strides
    size = array.itemsize
    if column_stride != size and array.shape[1] > 1:
        return None
    rows = row_stride // size if array.shape[0] > 1 else array.shape[1]
    if row_stride % size or rows < max(array.shape[1], 1):
        return None
    return rows


def started_threads() -> int:
    """The thread count BLAS started with (numpy's default, or OPENBLAS_NUM_THREADS): how many
    cores a kernel's matmul chains may use side by side (core/deferred.py). 1 where the library
    cannot be steered: a BLAS that picks its own threads may split overlapping calls differently."""
    library = _openblas()
    return library.started_threads if library is not None else 1


@contextlib.contextmanager
def limited(threads: int):
    """Run the block with at most `threads` BLAS threads, then restore the previous count."""
    library = _openblas() if os.name == "posix" else None
    if library is None:
        yield
        return
    previous = library.get_threads()
    library.set_threads(min(threads, previous))
    try:
        yield
    finally:
        library.set_threads(previous)
