"""`torch.autocast("neuron", dtype=torch.bfloat16)`: which ops run in the low dtype, which in fp32.

The lists follow PyTorch's own autocast policy (matmul-like ops and convolutions cast down; ops whose
accuracy suffers in bf16 -- exp/log families, norms, softmax, losses -- run in fp32). Every other op
falls through the autocast key untouched (registered in trnsim.torch.device). A matmul that runs in
bf16 then accumulates in fp32 on the device (trnsim.torch.ops.fp32_accumulate).
"""

from __future__ import annotations

import torch

from trnsim.errors import UnsupportedError

LOWER_PRECISION = """conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution
    _convolution prelu addmm addmv addr matmul einsum mm mv linear addbmm baddbmm bmm chain_matmul
    linalg_multi_dot scaled_dot_product_attention""".split()
FP32 = """acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus
    layer_norm group_norm frobenius_norm nuclear_norm cosine_similarity poisson_nll_loss
    cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss
    huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss
    triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm
    logsumexp softmax log_softmax cross_entropy_loss""".split()

BANNED = ["binary_cross_entropy"]
"""Refused under autocast, as on CUDA: on a bf16 input (the usual sigmoid output) it is not
accurate, and with_logits is the safe form."""

_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _refused(name: str):
    def refuse(*args, **kwargs):
        raise UnsupportedError(f"{name} under torch.autocast('neuron') is refused, as CUDA's autocast "
                               "refuses it: its input is usually a sigmoid's low-precision output",
                               what=f"{name} under autocast", hint="fold the sigmoid in: "
                               "F.binary_cross_entropy_with_logits / nn.BCEWithLogitsLoss")
    return refuse


def _cast(value, dtype):
    """Floating neuron tensors (not float64) cast to `dtype`; everything else as it is."""
    if isinstance(value, torch.Tensor):
        floating = value.is_floating_point() and value.dtype != torch.float64
        eligible = floating and value.device.type == "neuron"
        return value.to(dtype) if eligible and value.dtype != dtype else value
    if type(value) in (list, tuple):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _kernel(op, lower: bool):
    def autocast_kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype("neuron") if lower else torch.float32
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})

    return autocast_kernel


def register(library: torch.library.Library) -> int:
    """Register the casting kernels on the AutocastPrivateUse1 key; returns how many overloads."""
    count = 0
    for names, lower in ((LOWER_PRECISION, True), (FP32, False)):
        for name in names:
            packet = getattr(torch.ops.aten, name)
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if op._schema.is_mutable:
                    continue
                qualified = name if overload == "default" else f"{name}.{overload}"
                library.impl(qualified, _kernel(op, lower), "AutocastPrivateUse1")
                count += 1
    for name in BANNED:
        library.impl(name, _refused(name), "AutocastPrivateUse1")
        count += 1
    return count
