"""Recycled backing memory for tile values and fp32 shadows.

Why: a fresh large numpy array is fresh pages from the OS, and the first write to each page is a
page fault. A 2048^3 blocked matmul kernel allocates ~130 MB of tiles per run (SBUF blocks, their
fp32 upcasts, PSUM tiles, the output), and those faults cost ~10% of its time on the project's
2-core machine (measured with bench/emulator.py and getrusage: ~5,700 faults per run).

The pool keeps the blocks it handed out (up to `LIMIT_BYTES` in all) and hands a block out again
once nothing but the pool refers to it. "Nothing refers to it" is read from the block's reference
count: every numpy array that shares its memory (the 1-D array `empty` returns, any slice or
window of it, a torch tensor made from it) keeps a reference to the block, so a count at the
pool's own baseline means no array anywhere can still see the memory. Values in a reused block are
stale: callers treat `empty` exactly like `np.empty` (tiles get their uninitialised fill on first
read, shadows and sums are fully written before use).
"""

from __future__ import annotations

import sys

import numpy as np

LIMIT_BYTES = 256 << 20
"""Most memory the pool keeps: a 2048^3 bf16 matmul kernel needs ~130 MB of tiles per run."""

SMALLEST_BYTES = 64 << 10
"""Smaller arrays come from malloc's heap, which already reuses them without new pages."""

BLOCKS_PER_SIZE = 32
"""Most blocks kept of one size, so finding an idle one stays a short scan (a kernel whose queued
instructions hold hundreds of same-sized tiles alive gets the rest from numpy)."""


def _holders(block: np.ndarray) -> int:
    return sys.getrefcount(block)


def _idle_holders() -> int:
    """The count `_holders` reports for a block held only by the pool's list (CPython detail,
    so measured rather than assumed)."""
    blocks = [np.empty(1, np.uint8)]
    for block in blocks:
        return _holders(block)
    raise AssertionError("unreachable")


_IDLE = _idle_holders()


class ArrayPool:
    """Blocks of raw bytes by size; `empty` gives an idle one or makes (and keeps) a new one.

    The process's pool is `trnsim.core.runtime.current().pool`. Safe across threads (LNC=2 runs two
    cores as threads): whoever finds an idle block holds a reference to it from then on, so no
    other caller can see it as idle."""

    def __init__(self, limit_bytes: int = LIMIT_BYTES):
        self.limit_bytes = limit_bytes
        self.kept_bytes = 0
        self.blocks: dict[int, list[np.ndarray]] = {}

    def empty(self, count: int, dtype) -> np.ndarray:
        """A 1-D array of `count` elements of `dtype` with unspecified values, like np.empty."""
        dtype = np.dtype(dtype)
        size = count * dtype.itemsize
        if size < SMALLEST_BYTES:
            return np.empty(count, dtype)
        return self._block(size).view(dtype)

    def _block(self, size: int) -> np.ndarray:
        same_size = self.blocks.setdefault(size, [])
        for block in same_size:
            if _holders(block) == _IDLE:
                return block
        block = np.empty(size, np.uint8)
        if len(same_size) < BLOCKS_PER_SIZE and self.kept_bytes + size <= self.limit_bytes:
            same_size.append(block)
            self.kept_bytes += size
        return block

    def clear(self) -> None:
        """Forget every block (blocks still in use stay valid; they are simply not reused)."""
        self.blocks.clear()
        self.kept_bytes = 0
