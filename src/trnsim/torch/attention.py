"""`scaled_dot_product_attention` on neuron picks the same kernel CPU would pick.

SDPA is a composite op whose C++ code chooses a fused kernel by device type; for a device with no
C++ choice function it takes the unfused math path, whose rounding differs from CPU's fused
attention. This Autograd-key kernel asks CPU's own chooser and then calls the chosen aten op on the
neuron tensors, so autograd records that op's formula and results stay bitwise equal to CPU.
"""

from __future__ import annotations

import torch

from trnsim.torch.tensor import buffer_of

aten = torch.ops.aten
_FLASH = int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)


def _float_mask(mask, dtype):
    """A boolean mask as additive -inf/0, as the composite op converts it."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros_like(mask, dtype=dtype).masked_fill_(mask.logical_not(), float("-inf"))


def _stand_in(tensor):
    """A real CPU tensor with the layout of `tensor`'s buffer and its requires_grad: what the
    chooser reads (CPU refuses the fused kernel, which has no gradient for it, to a mask that
    requires grad, e.g. a learned relative-position bias)."""
    if tensor is None:
        return None
    buffer = buffer_of(tensor)
    if type(buffer) is torch.Tensor:
        stand_in = buffer.detach()
    else:
        stand_in = torch.empty_strided(tuple(int(n) for n in buffer.shape),
                                       tuple(int(n) for n in buffer.stride()), dtype=buffer.dtype)
    return stand_in.requires_grad_(tensor.requires_grad)


def cpu_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    """The fused kernel CPU picks for these inputs. While tracing, the inputs are fake and the fake
    chooser always answers "math", so the question is put to real empty tensors of the same layout."""
    with torch.utils._python_dispatch._disable_current_modes():
        return aten._fused_sdp_choice(_stand_in(query), _stand_in(key), _stand_in(value),
                                      _stand_in(attn_mask), dropout_p, is_causal, scale=scale,
                                      enable_gqa=enable_gqa)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False):
    choice = cpu_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mask = _float_mask(attn_mask, query.dtype)
    if choice == _FLASH:
        return aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=mask, scale=scale)[0]
    return aten._scaled_dot_product_attention_math(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


def register(library: torch.library.Library) -> None:
    library.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradPrivateUse1")
