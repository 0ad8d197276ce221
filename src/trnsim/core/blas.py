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
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class _Library:
    """The OpenBLAS entry points trnsim calls."""

    set_threads: Callable
    get_threads: Callable
    sgemm: Callable | None  # cblas_sgemm with argtypes set, or None where it is not exported
    sgemm_batch: Callable | None  # cblas_sgemm_batch where it is exported and checked (see `_batch`)
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
                config = _config(library, prefix, suffix)
                batch = _batch(getattr(library, f"{cblas}_sgemm_batch{suffix}", None), integer, config)
                return _Library(setter, getter, sgemm, batch, getter(), config)
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


def _batch(function, integer, config: str) -> Callable | None:
    """cblas_sgemm_batch, where the library exports it and is a version whose batch code was read
    for this use (0.3.29-0.3.31: with one thread it makes the products one by one, in order, with
    the routine cblas_sgemm uses for them; see SMALL_MNK for what it must not be given)."""
    version = re.match(r"OpenBLAS (\d+)\.(\d+)\.(\d+)", config)
    checked = version is not None and (0, 3, 29) <= tuple(map(int, version.groups())) <= (0, 3, 31)
    if function is None or integer is not ctypes.c_int64 or not checked:
        return None
    function.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 13 + [integer, ctypes.c_void_p]
    function.restype = None
    return function


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
    """Make the recorded `gemm` calls, in order, with the bits separate calls give. Consecutive
    calls that `_batched` allows go to sgemm_batch in one call: with one thread it makes them one by
    one, in order, with the level-3 routine cblas_sgemm uses for them (OpenBLAS 0.3.29-0.3.31,
    interface/gemm.c and interface/gemm_batch.c; tests/core/test_core_blas.py compares), and the
    worker that calls it needs the GIL once per batch instead of once per GEMM. With more than one
    BLAS thread the batch routine would make its products side by side, so then each is its own call."""
    library = _openblas()
    if library is None or library.sgemm_batch is None or library.get_threads() != 1:
        for call in calls:
            _multiply(*call)
        return
    start = 0
    while start < len(calls):
        args = _sgemm_args(library, *calls[start])
        if args is None or not _batched(args):
            _multiply(*calls[start])
            start += 1
            continue
        group = [args]
        end = start + 1
        while end < len(calls) and (args := _sgemm_args(library, *calls[end])) is not None \
                and _batched(args):
            group.append(args)
            end += 1
        if len(group) > 1:
            _run_batch(library, group)
        else:  # a batch of one costs more than a cblas_sgemm call
            _multiply(*calls[start])
        start = end


def _multiply(stationary: np.ndarray, moving: np.ndarray, out: np.ndarray, add: bool) -> None:
    library = _openblas()
    args = _sgemm_args(library, stationary, moving, out, add)
    if args is None:
        product = stationary.T @ moving
        if add:
            np.add(out, product, out=out)
        else:
            out[...] = product
    else:
        library.sgemm(_ROW_MAJOR, _TRANSPOSE, _NO_TRANSPOSE, *args[:3], 1.0, args[6], args[3], args[7],
                      args[4], args[9], args[8], args[5])


def _sgemm_args(library: _Library | None, stationary: np.ndarray, moving: np.ndarray, out: np.ndarray,
                add: bool) -> tuple | None:
    """(m, n, k, lda, ldb, ldc, a, b, c, beta) of the row-major sgemm out = stationary.T @ moving
    (+ out), or None where numpy must multiply (no sgemm, an empty product, or a layout BLAS cannot
    take)."""
    if library is None or library.sgemm is None or 0 in out.shape or stationary.shape[0] == 0:
        return None
    rows = [_blas_rows(a) for a in (stationary, moving, out)]
    if None in rows:
        return None
    (k, m), n = stationary.shape, moving.shape[1]
    return (m, n, k, *rows, stationary.ctypes.data, moving.ctypes.data, out.ctypes.data, 1.0 if add else 0.0)


SMALL_MNK = 100 ** 3
"""OpenBLAS's batch routine sends products of at most this many multiply-adds to its small-matrix
kernels through a table that DYNAMIC_ARCH builds (numpy's) do not resolve, and crashes
(interface/gemm_batch.c, checked for 0.3.29-0.3.31): those go to cblas_sgemm instead."""


def _batched(args: tuple) -> bool:
    """Whether this product may go to sgemm_batch: cblas_sgemm takes other routines for products
    of one row or column (gemv) and for small ones (SMALL_MNK), which the batch must not get."""
    m, n, k = args[:3]
    return m > 1 and n > 1 and m * n * k > SMALL_MNK


def _run_batch(library: _Library, group: list[tuple]) -> None:
    """One sgemm_batch call over `group` (each product its own group of one)."""
    count = len(group)
    fields = np.array([args[:9] for args in group], np.int64).T.copy()  # m, n, k, lda, ldb, ldc, a, b, c
    betas = np.array([args[9] for args in group], np.float32)
    alphas = np.ones(count, np.float32)
    transposes = np.array([_TRANSPOSE, _NO_TRANSPOSE], np.int32).repeat(count)
    sizes = np.ones(count, np.int64)
    pointers = [row.ctypes.data for row in fields]
    library.sgemm_batch(_ROW_MAJOR, transposes.ctypes.data, transposes[count:].ctypes.data,
                        pointers[0], pointers[1], pointers[2], alphas.ctypes.data, pointers[6], pointers[3],
                        pointers[7], pointers[4], betas.ctypes.data, pointers[8], pointers[5], count,
                        sizes.ctypes.data)


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


def threads() -> int:
    """BLAS's thread count now (1 where the library cannot be steered)."""
    library = _openblas() if os.name == "posix" else None
    return library.get_threads() if library is not None else 1


def set_threads(count: int) -> None:
    """Set BLAS's thread count (kernels run with one: `Runtime.one_blas_thread`); a no-op where
    the library cannot be steered."""
    library = _openblas() if os.name == "posix" else None
    if library is not None:
        library.set_threads(count)
