"""The emulator's process-wide state, on one object with a reset.

A few things outlive a kernel launch on purpose, to make the next launch faster: the array pool
(memory for tile values, kept between runs), the cache of kernel source lines, and the counters
and caches of the layers above core (the torch device's fallback counts and op times). They all
hang off one `Runtime`, so there is one place to see them and one `reset()` that returns the
process to its fresh state.
The scheduler's pause of the cyclic garbage collector, the shorter GIL switch interval and the
single BLAS thread while kernels run, and the lock for owed NaN fills are here too: they are shared
by every thread of the process.

`current()` is the process's runtime. Layers above core (torch/) keep their state on it through
`counter(name)` and `on_reset(clear)`, so core never imports them.

Not here, by design: state with a shorter lifetime lives on its own object (a launch's cores,
memory and trace on `Launch` and `NeuronCore`; settings scoped to a block in contextvars:
`config.override`, the active NKI core, the stochastic-rounding stream), and memoised facts that
a reset would rebuild identically (the hardware catalog, the numerics fast-path tables, the
OpenBLAS library numpy loaded and the thread count it started with).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import sys
import threading
from collections.abc import Callable

from trnsim.core import blas
from trnsim.core.pool import ArrayPool

KERNEL_SWITCH_INTERVAL_S = 0.0005
"""The GIL switch interval while a kernel runs (Python's default is 5 ms). A GEMM worker
(core/deferred.py) needs the GIL after every BLAS call, and waits up to one interval for the kernel's
thread to hand it over, with a core idle meanwhile (docs/emulator-speed.md has the A/B runs)."""


class Runtime:
    """Everything trnsim keeps between kernel launches, and `reset()` to forget it.

    Attributes:
        pool: recycled memory for tile values and fp32 shadows (core/pool.py).
        kernel_lines: id(code) -> (code, its file if it is the user's, {bytecode offset:
            SourceLoc}) for every code object a kernel line was looked up through
            (core/machine.py); the entry holds its code object, so no other code can take the id.
        kernel_files: the files of every kernel function made into a kernel (`nki.jit`), trnsim's
            own among them (cost/kernels.py): a kernel line is looked for up to them, not past
            them into the code that launched the kernel. Kept by `reset`: it describes code.
        counters: named counters that layers register with `counter` (torch: fallback counts).
        fill_lock: held while a buffer's owed uninitialised fill is written (core/memory.py):
            the cores of an LNC=2 launch are threads writing halves of one output.
    """

    def __init__(self):
        self.pool = ArrayPool()
        self.kernel_lines: dict[int, tuple] = {}
        self.kernel_files: set[str] = set()
        self.counters: dict[str, collections.Counter] = {}
        self.fill_lock = threading.Lock()
        self._clearers: list[Callable[[], None]] = []
        self._collector = _SharedSetting(gc.isenabled, _set_collector, lambda enabled: False)
        self._switch_interval = _SharedSetting(sys.getswitchinterval, sys.setswitchinterval,
                                               lambda interval: min(interval, KERNEL_SWITCH_INTERVAL_S))
        self._blas_threads = _SharedSetting(blas.threads, blas.set_threads, lambda count: min(count, 1))

    def add_kernel_file(self, filename: str) -> None:
        """Look for kernel lines in `filename` from now on (its code objects are judged again)."""
        path = os.path.abspath(filename)
        if path not in self.kernel_files:
            self.kernel_files.add(path)
            self.kernel_lines.clear()

    def counter(self, name: str) -> collections.Counter:
        """The counter called `name`, made empty on first use; `reset` empties it."""
        return self.counters.setdefault(name, collections.Counter())

    def on_reset(self, clear: Callable[[], None]) -> None:
        """Call `clear` on every `reset`: how a layer above core hangs a cache on the runtime."""
        self._clearers.append(clear)

    def reset(self) -> None:
        """Back to a fresh process: empty pool, no cached kernel lines, zeroed counters,
        registered caches cleared. Arrays already handed out stay valid. A scheduler's GC pause
        in progress is left to end on its own."""
        self.pool.clear()
        self.kernel_lines.clear()
        for counter in self.counters.values():
            counter.clear()
        for clear in self._clearers:
            clear()

    def gc_paused(self):
        """Run the block with the cyclic garbage collector off (timing/schedule.py: a long loop
        that makes many small objects and no cycles). The collector comes back, if it was on,
        when the last of overlapping pauses ends."""
        return self._collector.held()

    def quick_gil_handoff(self):
        """Run the block with the GIL switch interval at most KERNEL_SWITCH_INTERVAL_S; the
        process's interval comes back when the last of overlapping uses ends."""
        return self._switch_interval.held()

    def one_blas_thread(self):
        """Run the block with one BLAS thread (a kernel's matmuls: core/blas.py says why); the
        process's thread count comes back when the last of overlapping uses ends (the ranks of a
        multi-rank launch are threads, each running its kernel)."""
        return self._blas_threads.held()


class _SharedSetting:
    """A process-wide setting that several users change together: uses nest and may overlap across
    threads. The first to start saves the process's value and sets `choose(value)`; the last to end
    puts the saved value back (else a use ending while another runs would restore the wrong one)."""

    def __init__(self, read: Callable, write: Callable, choose: Callable):
        self._read, self._write, self._choose = read, write, choose
        self._lock = threading.Lock()
        self._users = 0
        self._saved = None

    @contextlib.contextmanager
    def held(self):
        with self._lock:
            if self._users == 0:
                self._saved = self._read()
                self._write(self._choose(self._saved))
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    self._write(self._saved)


def _set_collector(enabled: bool) -> None:
    if enabled:
        gc.enable()
    else:
        gc.disable()


_PROCESS = Runtime()


def current() -> Runtime:
    """The process's runtime."""
    return _PROCESS
