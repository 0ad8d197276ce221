"""`nki.isa.constants`: the ISA's enums (engines, DMA modes, reduce commands, NeuronCore versions).

nki-library imports them both ways, `from nki.isa.constants import dge_mode` and
`from nki.isa import constants`; `trnsim.nki.isa` re-exports every name, so `nisa.dge_mode` is the
same object.
"""

from __future__ import annotations

import enum


class engine(enum.Enum):  # noqa: N801 - NKI's spelling
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(enum.Enum):  # noqa: N801
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


class dge_mode(enum.IntEnum):  # noqa: N801
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.Enum):  # noqa: N801
    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):  # noqa: N801
    none = "none"
    double_row = "double_row"


class nc_version(enum.IntEnum):  # noqa: N801
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(enum.Enum):  # noqa: N801
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


tensor_engine, vector_engine, scalar_engine, gpsimd_engine = (engine.tensor, engine.vector, engine.scalar,
                                                              engine.gpsimd)
unknown_engine = engine.unknown
