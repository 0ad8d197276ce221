"""Small kernel-side helpers the nki tests share (imported by test modules in this folder)."""

import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


def on_chip(array, dtype=None):
    """An SBUF copy of an HBM tensor (in `dtype`, default its own)."""
    tile = nl.ndarray(array.shape, dtype=dtype or array.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=array)
    return tile


def to_hbm(tile):
    """A shared-HBM copy of a tile, to return from a kernel."""
    out = nl.ndarray(tile.shape, dtype=tile.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out
