"""The array pool reuses a block only when no array anywhere can still see its memory."""

import gc
import itertools

import numpy as np
import pytest

from trnsim.core.isa import Memory
from trnsim.core.memory import Allocator, DType, MemorySystem, full_view
from trnsim.core.pool import SMALLEST_BYTES, ArrayPool
from trnsim.core.runtime import current as current_runtime

COUNT = SMALLEST_BYTES // 4 * 2  # float32 elements: large enough to be pooled


@pytest.mark.parametrize("keep", [
    lambda a: a,
    lambda a: a[10:20],
    lambda a: a.reshape(2, -1).T,
    lambda a: a.view(np.uint8)[::3],
    lambda a: np.ndarray((4,), np.float32, a, 64),
    lambda a: memoryview(a),
    lambda a: __import__("torch").from_numpy(a),
], ids=["array", "slice", "reshaped", "reinterpreted", "ndarray-buffer", "memoryview", "torch"])
def test_a_block_is_not_reused_while_anything_shares_its_memory(keep):
    pool = ArrayPool()
    first = pool.empty(COUNT, np.float32)
    address = first.__array_interface__["data"][0]
    held = keep(first)
    del first
    gc.collect()
    second = pool.empty(COUNT, np.float32)
    assert second.__array_interface__["data"][0] != address
    del held
    third = pool.empty(COUNT, np.float32)
    assert third.__array_interface__["data"][0] == address  # the first block, idle again


def test_a_reused_block_may_change_dtype_and_is_fully_writable():
    pool = ArrayPool()
    first = pool.empty(COUNT, np.float32)
    first[...] = 1.0
    del first
    again = pool.empty(COUNT * 2, np.uint16)  # the same byte size, another dtype
    assert again.dtype == np.uint16 and again.size == COUNT * 2
    again[...] = 7
    assert (again == 7).all()


def test_the_pool_keeps_no_more_than_its_limit_and_ignores_small_arrays():
    pool = ArrayPool(limit_bytes=COUNT * 4 * 2)
    arrays = [pool.empty(COUNT, np.float32) for _ in range(3)]  # all in use: three blocks
    assert pool.kept_bytes == COUNT * 4 * 2 and len(pool.blocks[COUNT * 4]) == 2
    small = pool.empty(16, np.float32)
    assert small.size == 16 and 64 not in pool.blocks
    del arrays
    pool.clear()
    assert pool.kept_bytes == 0 and not pool.blocks


def test_a_tile_on_reused_memory_still_reads_the_uninitialised_fill(monkeypatch):
    monkeypatch.setattr(current_runtime(), "pool", ArrayPool())
    memory = MemorySystem(Allocator(Memory.SBUF, 1 << 20, 128), Allocator(Memory.PSUM, 16384, 128, 2048),
                          with_values=True, track_writes=False, ids=itertools.count())
    f32 = DType("float32", np.dtype(np.float32))
    shape = (128, COUNT // 128)
    first = memory.allocate(Memory.SBUF, shape, f32, "first")
    full_view(first).assign(np.ones(shape, np.float32))
    address = first.data.__array_interface__["data"][0]
    del first
    gc.collect()
    second = memory.allocate(Memory.SBUF, shape, f32, "second")
    assert second.data.__array_interface__["data"][0] == address  # the pool gave the block back
    assert np.isnan(second.values()).all()
