"""How the neuron device rounds fp32 -> bf16: to nearest even, or stochastically when Neuron's own
switch is on (NEURON_RT_STOCHASTIC_ROUNDING_EN=1, seed NEURON_RT_STOCHASTIC_ROUNDING_SEED). Both
switches are read by `trnsim.numerics`, where their meaning lives; so is the rounding itself."""

from __future__ import annotations

import numpy as np
import torch

from trnsim import numerics


def stochastically_rounded(x: torch.Tensor) -> torch.Tensor | None:
    """`x` (fp32, on CPU) rounded stochastically to bf16 if the switch is on, else None (round to
    nearest even): the C++ core asks this for each fp32 -> bf16 write while the switch is set."""
    if x.dtype != torch.float32 or numerics.default_rounding() != "stochastic":
        return None
    rounded = numerics.cast(x.detach().contiguous().numpy(), "bfloat16", rounding="stochastic")
    return torch.from_numpy(rounded.view(np.int16)).view(torch.bfloat16).reshape(x.shape)
