"""A kernel around one instruction, for tests: inputs loaded into SBUF tiles of their own dtype,
`call(dst, *tiles)` issued, dst (through SBUF when it is a PSUM tile) stored to HBM."""

import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


def staged_kernel(call, out_shape, out_dtype, out_buffer: str = "sbuf") -> nki.Kernel:
    def kernel(*arrays):
        tiles = []
        for array in arrays:
            tile = nl.ndarray(array.shape, dtype=array.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=array)
            tiles.append(tile)
        dst = nl.ndarray(out_shape, dtype=out_dtype, buffer=getattr(nl, out_buffer))
        call(dst, *tiles)
        staged = dst
        if out_buffer == "psum":
            staged = nl.ndarray(out_shape, dtype=out_dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=staged, src=dst)
        out = nl.ndarray(out_shape, dtype=out_dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=staged)
        return out
    return nki.jit(kernel)
