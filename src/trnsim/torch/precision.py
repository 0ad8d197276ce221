"""How the neuron device rounds fp32 -> bf16: to nearest even, or stochastically when Neuron's own
switch is on (NEURON_RT_STOCHASTIC_ROUNDING_EN=1, seed NEURON_RT_STOCHASTIC_ROUNDING_SEED). Both
switches are read by `trnsim.numerics`, where their meaning lives; so is the rounding itself."""

from __future__ import annotations

import numpy as np
import torch

from trnsim import numerics


def rounds_stochastically(src: torch.dtype, dst: torch.dtype) -> bool:
    """True when a cast from `src` to `dst` must go through stochastic rounding right now."""
    return src == torch.float32 and dst == torch.bfloat16 and numerics.default_rounding() == "stochastic"


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` (a CPU tensor) cast to `dtype` the way the device's engines write it.

    While torch.compile traces, `x` is a fake tensor without values: the cast is recorded as a
    plain one, and the compiled graph rounds stochastically when it runs (same kernel table).
    """
    if not rounds_stochastically(x.dtype, dtype) or type(x) is not torch.Tensor:
        return x.to(dtype)
    rounded = numerics.cast(x.detach().contiguous().numpy(), "bfloat16", rounding="stochastic")
    return torch.from_numpy(rounded.view(np.int16)).view(torch.bfloat16).reshape(x.shape)


def stochastically_rounded(x: torch.Tensor) -> torch.Tensor | None:
    """`x` (fp32, CPU) rounded stochastically to bf16 if the switch is on, else None (round to
    nearest even): the C++ core asks this for each fp32 -> bf16 write while the switch is set."""
    return round_to(x, torch.bfloat16) if rounds_stochastically(x.dtype, torch.bfloat16) else None
