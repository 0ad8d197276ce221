"""Allocation, liveness, capacity, PSUM banks, uninitialised fill and strict reads."""

import gc

import numpy as np
import pytest

from trnsim.core.isa import Memory
from trnsim.core.memory import (
    Allocator,
    DType,
    HbmBudget,
    MemorySystem,
    View,
    check_initialised,
    full_view,
)
from trnsim.errors import CapacityError, HazardError, ShapeError

F32 = DType("float32", np.dtype(np.float32))
I32 = DType("int32", np.dtype(np.int32))


def system(track=False, sbuf_bytes=4096, psum_bytes=8192, bank=2048):
    import itertools
    sbuf = Allocator(Memory.SBUF, sbuf_bytes, 128)
    psum = Allocator(Memory.PSUM, psum_bytes, 128, bank)
    return MemorySystem(sbuf, psum, with_values=True, track_writes=track, ids=itertools.count())


def test_fill_is_nan_for_floats_and_4_for_ints():
    memory = system()
    assert np.isnan(memory.allocate(Memory.SBUF, (4, 4), F32, "f").values()).all()
    assert (memory.allocate(Memory.SBUF, (4, 4), I32, "i").values() == 4).all()


def test_the_fill_is_skipped_only_by_a_write_that_covers_the_whole_buffer():
    memory = system()
    whole, part = (memory.allocate(Memory.SBUF, (4, 4), F32, name) for name in ("whole", "part"))
    full_view(whole).assign(np.ones((4, 4), np.float32))
    assert whole._shared.unfilled is False and (whole.values() == 1).all()
    View(part, (4, 2), (4, 1), 0).assign(np.ones((4, 2), np.float32))  # half of each row
    values = part.values().reshape(4, 4)
    assert (values[:, :2] == 1).all() and np.isnan(values[:, 2:]).all()


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "int8", "uint16",
                                  "bool"])
def test_fill_of_every_width_matches_numpy_fill(name):
    """The fill goes through an unsigned view; it must equal numpy's own fill bit for bit."""
    import ml_dtypes
    element = DType(name, np.dtype(getattr(ml_dtypes, name, None) or name))
    data = system().allocate(Memory.HBM, (3, 5), element, "t").values()
    expected = np.full(15, element.fill_value(), element.numpy)
    assert data.dtype == element.numpy and data.shape == (15,)
    assert data.view(np.uint8).tobytes() == expected.view(np.uint8).tobytes()
    if element.is_float:
        assert np.isnan(data.astype(np.float32)).all()


def test_first_fit_reuses_space_of_dropped_tiles():
    memory = system()
    a = memory.allocate(Memory.SBUF, (128, 512), F32, "a")
    assert a.address_bytes == 0
    b = memory.allocate(Memory.SBUF, (128, 256), F32, "b")
    assert b.address_bytes == 2048
    del a
    gc.collect()
    c = memory.allocate(Memory.SBUF, (128, 256), F32, "c")
    assert c.address_bytes == 0


def test_a_tile_python_still_holds_does_not_stop_the_next_one():
    """The compiler frees a tile after its last use, which only the finished trace tells: a tile that
    does not fit next to the ones Python holds goes past the end, and the launch is re-placed."""
    memory = system()
    keep = memory.allocate(Memory.SBUF, (128, 768), F32, "keep")
    more = memory.allocate(Memory.SBUF, (128, 512), F32, "more")
    sbuf = memory.allocators[Memory.SBUF]
    assert (keep.address_bytes, more.address_bytes) == (0, 3072) and sbuf.replan
    assert sbuf.placed[more.id].size_bytes == 2048 and not sbuf.placed[more.id].explicit


def test_a_tile_wider_than_a_partition_is_refused_at_once():
    refused = "'wide' needs 4100 B per partition; a partition holds 4096 B"
    with pytest.raises(CapacityError, match=refused) as caught:
        system().allocate(Memory.SBUF, (128, 1025), F32, "wide")
    assert (caught.value.required, caught.value.available) == (4100, 4096)


def test_psum_tiles_never_cross_a_bank_when_placed_automatically():
    memory = system()
    small = memory.allocate(Memory.PSUM, (128, 384), F32, "small")  # 1536 B
    second = memory.allocate(Memory.PSUM, (128, 384), F32, "second")
    assert small.address_bytes == 0 and second.address_bytes == 2048


def test_explicit_address_checks_bank_alignment_and_overlap():
    memory = system()
    with pytest.raises(CapacityError, match="crosses"):
        memory.allocate(Memory.PSUM, (128, 512), F32, "bad", address=1024)
    with pytest.raises(CapacityError, match="aligned"):
        memory.allocate(Memory.SBUF, (128, 4), F32, "odd", address=2)
    held = memory.allocate(Memory.SBUF, (128, 64), F32, "held", address=0)
    over = memory.allocate(Memory.SBUF, (128, 64), F32, "over", address=128)  # honoured, as on hardware
    assert (held.address_bytes, over.address_bytes) == (0, 128)
    assert memory.allocators[Memory.SBUF].aliases == [(held.id, over.id)]  # checked once the launch is over


def test_strict_read_of_unwritten_elements():
    memory = system(track=True)
    buffer = memory.allocate(Memory.SBUF, (8, 8), F32, "t")
    view = full_view(buffer)
    with pytest.raises(HazardError, match="64 of 64"):
        check_initialised(view, "tensor_copy")
    view.written_mask()[...] = True
    check_initialised(view, "tensor_copy")


def test_tiles_on_disjoint_partitions_may_share_bytes():
    memory = system()
    low = memory.allocate(Memory.SBUF, (64, 64), F32, "low", address=(0, 0))
    high = memory.allocate(Memory.SBUF, (64, 64), F32, "high", address=(64, 0))
    assert (low.base_partition, high.base_partition) == (0, 64)
    clash = memory.allocate(Memory.SBUF, (32, 64), F32, "clash", address=(48, 0))
    assert memory.allocators[Memory.SBUF].aliases == [(low.id, clash.id), (high.id, clash.id)]
    with pytest.raises(ShapeError):
        memory.allocate(Memory.SBUF, (64, 4), F32, "past_the_end", address=(96, 1024))


def test_a_write_from_another_thread_waits_for_the_owed_fill(monkeypatch):
    """LNC=2 cores are threads writing halves of one output: the NaN fill owed to the buffer must
    finish before either half is written, or the fill would wipe the other core's half."""
    import threading
    import time

    from trnsim.core import memory as memory_module
    slow_fill = memory_module.fill_uninitialised

    def fill_after_a_pause(data, dtype):
        time.sleep(0.05)  # the other thread writes meanwhile, unless it waits for the fill
        slow_fill(data, dtype)
    monkeypatch.setattr(memory_module, "fill_uninitialised", fill_after_a_pause)
    shared = system().allocate(Memory.SBUF, (4, 4), F32, "shared")
    filler = threading.Thread(target=shared.values)
    filler.start()
    time.sleep(0.01)
    View(shared, (2, 4), (4, 1), 8).assign(np.ones((2, 4), np.float32))  # rows 2-3, like a peer core
    filler.join()
    values = shared.values().reshape(4, 4)
    assert (values[2:] == 1).all() and np.isnan(values[:2]).all()


def hbm_system(capacity_bytes: int, with_values=True) -> MemorySystem:
    import itertools
    return MemorySystem(Allocator(Memory.SBUF, 4096, 128), Allocator(Memory.PSUM, 8192, 128, 2048),
                        with_values=with_values, track_writes=False, ids=itertools.count(),
                        hbm=HbmBudget(capacity_bytes, "a test budget"))


def test_hbm_counts_live_tensors_and_frees_dropped_ones():
    memory = hbm_system(1000)
    first = memory.allocate(Memory.HBM, (100,), F32, "first")  # 400 B
    with pytest.raises(CapacityError, match="'second' needs 800 B, 600 B of 1000 B are free") as caught:
        memory.allocate(Memory.HBM, (200,), F32, "second")
    assert (caught.value.memory, caught.value.required, caught.value.available) == ("hbm", 800, 600)
    assert "first 400 B" in str(caught.value)  # the live tensors are listed
    del first
    gc.collect()
    assert memory.allocate(Memory.HBM, (200,), F32, "second").shape == (200,)


def test_a_tensor_over_hbm_is_refused_before_the_host_allocates_it():
    """1 TiB as a broadcast view costs 4 bytes; the check must come before it is made contiguous."""
    huge = np.broadcast_to(np.ones(1, np.float32), (2**20, 2**18))
    with pytest.raises(CapacityError, match="needs 1 TiB"):
        hbm_system(1 << 30).allocate(Memory.HBM, huge.shape, F32, "huge", values=huge)


def test_an_on_chip_tile_is_placed_before_its_values_are_allocated():
    with pytest.raises(CapacityError, match="a partition holds"):  # 4 TiB of host memory if allocated first
        system().allocate(Memory.SBUF, (128, 2**33), F32, "wide")


def test_each_core_gets_its_chips_hbm_share_and_lnc2_two_shares():
    from trnsim import hardware
    chip = hardware.chip("trn2")
    assert HbmBudget.of_target("trn2").capacity_bytes == chip.hbm_bytes // chip.cores == 12 << 30
    assert HbmBudget.of_target("trn2", cores=2).capacity_bytes == 24 << 30


@pytest.mark.parametrize("shape", [(0, 4), (4, -1), (128, 0)])
def test_zero_size_and_negative_shapes_are_refused(shape):
    for memory in (Memory.HBM, Memory.SBUF):
        with pytest.raises(ShapeError, match="every dim must be an integer of at least 1"):
            system().allocate(memory, shape, F32, "t")


def test_buffers_record_whether_their_launch_is_over():
    memory = system()
    tile = memory.allocate(Memory.SBUF, (4, 4), F32, "t")
    assert not tile.launch.over and not tile.clone().launch.over
    memory.end_launch()
    assert tile.launch.over and tile.clone().launch.over
