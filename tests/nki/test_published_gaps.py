"""Gaps found by running the public NKI kernels (tests/published, docs/published-kernels.md)."""

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.language as nl
from trnsim.errors import UnsupportedError


def test_old_api_name_in_a_kernel_names_the_kernel_line():
    """nki-samples' fused_mamba tutorial still uses nl.par_dim: the refusal must point at that line."""

    @nki.jit
    def old_api_kernel(x):
        tile = nl.zeros((nl.par_dim(128), 64), dtype=x.dtype)
        return tile

    with pytest.raises(UnsupportedError, match=r"^test_published_gaps\.py:\d+ in old_api_kernel: .*par_dim"):
        nki.simulate(old_api_kernel)(np.zeros((128, 64), np.float32))
