"""What a launch refuses: tensors HBM cannot hold, empty shapes, bad targets and grids, generator
kernels, on-chip outputs, tiles kept from an earlier launch; and bool arrays keep their kind."""

import numpy as np
import pytest
import torch

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import hardware
from trnsim.errors import CapacityError, ConfigError, KernelError, ShapeError
from trnsim.nki.jit import MAX_PROGRAMS

X = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
TIB = np.broadcast_to(np.ones(1, np.float32), (2**20, 2**18))  # 1 TiB that costs 4 bytes until copied


@nki.jit
def copy(a):
    tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


# --- HBM is a memory with a size ----------------------------------------------------------------
@pytest.mark.parametrize("huge", [TIB, torch.ones(1).expand(2**20, 2**18)], ids=["numpy", "torch"])
def test_an_input_over_hbm_is_refused_not_materialised(huge):
    refused = r"'arg0' needs 1 TiB, 12 GiB of 12 GiB are free \(trn2"
    with pytest.raises(CapacityError, match=refused) as caught:
        nki.simulate(copy, target="trn2")(huge)
    assert caught.value.where.file == __file__  # the line that launched the kernel


def test_the_limit_is_the_cores_share_of_the_chips_hbm():
    chip = hardware.chip("trn3")
    share = chip.hbm_bytes // chip.cores

    def hand_back(a):
        return a
    nki.trace(hand_back, nki.TensorSpec((share // 4,), "float32"), target="trn3")  # fits exactly
    with pytest.raises(CapacityError, match="HBM is full"):
        nki.trace(hand_back, nki.TensorSpec((share // 4 + 1,), "float32"), target="trn3")


def test_an_lnc2_launch_has_both_cores_share():
    """The two cores of an LNC=2 launch share one HBM address space: 24 GiB on trn2, not 12."""
    def hand_back(a):
        return a
    sixteen_gib = nki.TensorSpec((4 << 30,), "float32")
    nki.trace(nki.jit(hand_back)[2], sixteen_gib, target="trn2")
    with pytest.raises(CapacityError, match="12 GiB are free"):
        nki.trace(hand_back, sixteen_gib, target="trn2")


def test_live_hbm_tensors_count_together():
    """Two 8 GiB inputs fit one by one in trn2's 12 GiB, not together."""
    half = nki.TensorSpec((2**31,), "float32")

    def both(a, b):
        return a
    with pytest.raises(CapacityError, match=r"'arg1' needs 8 GiB, 4 GiB .* live: arg0 8 GiB"):
        nki.trace(both, half, half, target="trn2")


def test_a_kernel_made_hbm_tensor_over_hbm_is_refused_at_its_line():
    def big_output(a):
        return nl.ndarray((2**20, 2**18), dtype=nl.float32, buffer=nl.shared_hbm)
    with pytest.raises(CapacityError, match="HBM is full") as caught:
        nki.simulate(big_output, target="trn2")(X)
    assert caught.value.where.function == "big_output"


@pytest.mark.parametrize("shape", [(0, 4), (4, -2)])
def test_empty_and_negative_shapes_are_refused(shape):
    def empty(a):
        return nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)
    with pytest.raises(ShapeError, match="every dim must be an integer of at least 1") as caught:
        nki.simulate(empty, target="trn2")(X)
    assert caught.value.where.function == "empty"
    with pytest.raises(ShapeError, match="TensorSpec shape") as caught:
        nki.TensorSpec(shape)
    assert caught.value.where.file == __file__
    with pytest.raises(ShapeError, match="TensorSpec shape"):
        nki.TensorSpec((2.5, 4))


# --- targets, grids and kernels -----------------------------------------------------------------
@pytest.mark.parametrize("target, says", [
    (0, "target=0 is not a target name"), (5, "target=5 is not a target name"),
    ("NeuronCore-v3", "NeuronCore-v3 is a NeuronCore, the core of target 'trn2'"),
    ("trn22", "did you mean 'trn2'"), ("", "unknown NKI target ''"),
])
def test_a_target_that_is_not_a_target_name_is_refused(target, says):
    with pytest.raises(ConfigError, match=says):
        nki.simulate(copy, target=target)(X)


@pytest.mark.parametrize("grid", [0, -1, 2.5, (2, 0), True])
def test_a_grid_must_count_programs(grid):
    with pytest.raises(KernelError, match="is not a number of programs"):
        copy[grid]


def test_an_absurd_grid_is_refused_before_running():
    with pytest.raises(KernelError, match=f"runs at most {MAX_PROGRAMS}"):
        copy[10**9]
    with pytest.raises(KernelError, match="has 4294967296 programs"):
        copy[2**16, 2**16]


def test_a_numpy_integer_grid_runs_that_many_programs():
    ids = []

    def kernel(a):
        ids.append(nl.program_id(0))
        return a
    nki.simulate(nki.jit(kernel)[np.int64(3)], target="trn2")(X)
    assert ids == [0, 1, 2]


def test_a_generator_kernel_is_refused_at_its_def_line():
    def generator(a):
        yield a
    with pytest.raises(KernelError, match="is a generator") as caught:
        nki.simulate(generator, target="trn2")(X)
    assert caught.value.where.line == generator.__code__.co_firstlineno


# --- outputs and tiles --------------------------------------------------------------------------
@pytest.mark.parametrize("buffer", [nl.sbuf, nl.psum])
def test_an_on_chip_tile_returned_as_output_is_refused(buffer):
    def on_chip(a):
        tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=buffer)
        nisa.memset(dst=tile, value=1.0)
        return tile
    with pytest.raises(KernelError, match="return: kernel output .* is an on-chip") as caught:
        nki.simulate(on_chip, target="trn2")(X)
    assert caught.value.where.function == "on_chip"


def test_a_tile_kept_from_an_earlier_launch_is_refused():
    kept = {}

    def keeper(a):
        if "tile" not in kept:
            kept["tile"] = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf, name="kept")
        nisa.dma_copy(dst=kept["tile"], src=a)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=kept["tile"])
        return out
    np.testing.assert_array_equal(nki.simulate(keeper, target="trn2")(X), X)
    with pytest.raises(KernelError, match="SBUF tensor 'kept' was made by an earlier launch") as caught:
        nki.simulate(keeper, target="trn2")(X + 1)
    assert caught.value.where.function == "keeper"


def test_bool_arrays_come_back_as_bool():
    mask = X > 10
    out = nki.simulate(copy, target="trn2")(mask)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, mask)
    back = nki.simulate(copy, target="trn2")(torch.from_numpy(mask))
    assert back.dtype == torch.bool and torch.equal(back, torch.from_numpy(mask))
