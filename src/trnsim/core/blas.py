"""The thread count of numpy's OpenBLAS while a kernel runs.

A kernel issues thousands of small GEMMs (128 x 128 x 512 per nc_matmul). Multi-threaded BLAS
synchronises its threads on every call; when other processes already keep every core busy that
costs up to 100x the arithmetic (measured on a loaded 2-core machine: 26 ms vs 0.24 ms per
instruction), while on an idle machine two threads are faster. So before kernels run, trnsim times
a few instruction-sized GEMMs both ways (at most every 5 s; best of a few alternating rounds, so a
burst of other work does not decide) and uses the faster. Where the library cannot be found (not
Linux, another BLAS) nothing changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import time

import numpy as np


@functools.cache
def _openblas():
    """(set, get) thread-count functions of the OpenBLAS numpy loaded, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        library = ctypes.CDLL(path)
        for prefix, suffix in (("scipy_openblas", "64_"), ("openblas", "64_"), ("openblas", "")):
            setter = getattr(library, f"{prefix}_set_num_threads{suffix}", None)
            getter = getattr(library, f"{prefix}_get_num_threads{suffix}", None)
            if setter is not None and getter is not None:
                return setter, getter
    return None


def threads_for_kernels() -> int | None:
    """1 if one BLAS thread runs an instruction-sized GEMM faster than BLAS's default right now,
    else None (leave BLAS alone). Measured at most every RECHECK_S seconds (a few ms each)."""
    if _openblas() is None:
        return None
    return _single_thread_is_faster(int(time.monotonic() // RECHECK_S))


RECHECK_S = 5.0
MULTI_THREAD_MARGIN = 0.8  # BLAS's default threads must take under 80% of one thread's time
_PROBE_CALLS = 8
_PROBE_ROUNDS = 3


@functools.lru_cache(maxsize=1)
def _single_thread_is_faster(_period: int) -> int | None:
    if _busy():  # other processes want every core: one thread, without probing
        return 1
    stationary = np.ones((128, 128), np.float32)
    moving = np.ones((128, 512), np.float32)

    def seconds(limit_s: float) -> float:
        start = time.perf_counter()
        for _ in range(_PROBE_CALLS):
            stationary.T @ moving
            if time.perf_counter() - start > limit_s:  # a thrashing pool: no need to finish
                break
        return time.perf_counter() - start

    with limited(1):
        seconds(float("inf"))
    seconds(float("inf"))
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


@contextlib.contextmanager
def limited(threads: int | None):
    """Run the block with at most `threads` BLAS threads, then restore the previous count."""
    functions = _openblas() if os.name == "posix" and threads is not None else None
    if functions is None:
        yield
        return
    setter, getter = functions
    previous = getter()
    setter(min(threads, previous))
    try:
        yield
    finally:
        setter(previous)
