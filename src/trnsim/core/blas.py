"""The thread count of numpy's OpenBLAS while a kernel runs.

A kernel issues thousands of small GEMMs (128 x 128 x 512 per nc_matmul). Multi-threaded BLAS
synchronises its threads on every call; when other processes already keep every core busy that
costs up to 100x the arithmetic (measured on a loaded 2-core machine: 26 ms vs 0.24 ms per
instruction). So kernels run with one BLAS thread when the machine is busy, and with BLAS's own
choice when it is not. Where the library cannot be found (not Linux, another BLAS) nothing changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os


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
    """1 when the 1-minute load average exceeds the CPU count, else None (leave BLAS alone)."""
    cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0] > cpus
    except OSError:
        return None
    return 1 if busy else None


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
