"""numpy's OpenBLAS as the emulator uses it: its thread count while a kernel runs, and a GEMM
that adds into PSUM in place.

A kernel issues thousands of small GEMMs (128 x 128 x 512 per nc_matmul). Multi-threaded BLAS
synchronises its threads on every call; when other processes already keep every core busy that
costs up to 100x the arithmetic (measured on a loaded 2-core machine: 26 ms vs 0.24 ms per
instruction), while on an idle machine two threads are faster. So before kernels run, trnsim times
a few instruction-sized GEMMs both ways (at most every 5 s; best of a few alternating rounds, so a
burst of other work does not decide) and uses the faster. Grids of matmuls run as one large GEMM
per K step (core/deferred.py) are numpy-sized products and use the threads BLAS started with
(`as_started`). Where the library cannot be found (not Linux, another BLAS) nothing changes.

`gemm` calls the library's sgemm directly so that a matmul accumulating into PSUM is one BLAS call
with beta = 1 (C = C + A.T @ B: each product is summed in registers, then added to C once, the
order PSUM accumulation has) instead of a product array and a second pass to add it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trnsim import hardware
from trnsim.core.runtime import current as current_runtime


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
    [K, M], [K, N], [M, N]). One sgemm call when the layouts allow it, else numpy."""
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


def threads_for_kernels() -> int | None:
    """1 if one BLAS thread runs an instruction-sized GEMM faster than BLAS's default right now,
    else None (leave BLAS alone). Measured at most every RECHECK_S seconds (a few ms each); the
    runtime keeps the answer (`Runtime.kernel_blas_threads`)."""
    if _openblas() is None:
        return None
    runtime, period = current_runtime(), int(time.monotonic() // RECHECK_S)
    probed = runtime.kernel_blas_threads
    if probed is None or probed[0] != period:
        probed = runtime.kernel_blas_threads = period, _single_thread_is_faster()
    return probed[1]


RECHECK_S = 5.0
MULTI_THREAD_MARGIN = 0.8  # BLAS's default threads must take under 80% of one thread's time
_PROBE_CALLS = 8
_PROBE_ROUNDS = 3


def _single_thread_is_faster() -> int | None:
    if _busy():  # other processes want every core: one thread, without probing
        return 1
    core = hardware.core("trn2")  # one nc_matmul at its largest tile: [K, M] and [K, N]
    stationary = np.ones((core.matmul_max_contraction, core.matmul_max_stationary_free), np.float32)
    moving = np.ones((core.matmul_max_contraction, core.matmul_max_moving_free), np.float32)

    def seconds(limit_s: float) -> float:
        start = time.perf_counter()
        for _ in range(_PROBE_CALLS):
            stationary.T @ moving
            if time.perf_counter() - start > limit_s:  # a thrashing pool: no need to finish
                break
        return time.perf_counter() - start

    with limited(1):
        warm_up_s = seconds(float("inf"))
    seconds(2 * warm_up_s)  # the default's warm-up, cut short like every timing of a thrashing pool
    # Best of a few alternating rounds: one burst of another process's work must not decide.
    single_s = default_s = float("inf")
    for _ in range(_PROBE_ROUNDS):
        with limited(1):
            single_s = min(single_s, seconds(float("inf")))
        default_s = min(default_s, seconds(2 * single_s))
        # Thrashing costs far more than one thread loses on an idle machine: demand a clear win.
        if default_s < MULTI_THREAD_MARGIN * single_s:
            return None
    return 1


def _busy() -> bool:
    """The 1-minute load average exceeds the CPU count: other processes want every core."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except OSError:
        return False


def limited(threads: int | None):
    """Run the block with at most `threads` BLAS threads, then restore the previous count."""
    if threads is None:
        return contextlib.nullcontext()
    return _thread_count(lambda library, previous: min(threads, previous))


def as_started():
    """Run the block with the thread count BLAS started with, as numpy's own a @ b does: GEMMs as
    large as a grid of matmuls gain from every thread even where a kernel limited them for its
    instruction-sized ones (see `threads_for_kernels`)."""
    return _thread_count(lambda library, previous: library.started_threads)


@contextlib.contextmanager
def _thread_count(choose: Callable[[_Library, int], int]):
    library = _openblas() if os.name == "posix" else None
    if library is None:
        yield
        return
    previous = library.get_threads()
    library.set_threads(choose(library, previous))
    try:
        yield
    finally:
        library.set_threads(previous)
