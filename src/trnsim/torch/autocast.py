"""`torch.autocast("neuron", dtype=torch.bfloat16)`: which ops run in the low dtype, which in fp32.

The lists are CUDA's autocast policy, op for op (matmul-like ops and convolutions cast down; ops whose
accuracy suffers in bf16 -- exp/log families, norms, softmax, sums, losses -- run in fp32; ops of
several inputs run in the widest of their dtypes). Every other op
falls through the autocast key untouched (registered in trnsim.torch.device). A matmul that runs in
bf16 then accumulates in fp32 on the device (trnsim.torch.ops.fp32_accumulate).
"""

from __future__ import annotations

import torch

from trnsim.errors import UnsupportedError

# CUDA's AutocastCUDA registrations (aten/src/ATen/autocast_mode.h of torch 2.13), by cast policy;
# tests/torch/test_torch_precision.py checks them against the installed torch's registrations.
LOWER_PRECISION = """_convolution _convolution.deprecated conv1d conv2d conv3d conv_tbc conv_transpose1d
    conv_transpose2d.input conv_transpose3d.input convolution cudnn_convolution cudnn_convolution_transpose
    prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul
    linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell
    rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention""".split()
FP32 = """acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar
    pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm rms_norm group_norm frobenius_norm.dim
    nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss
    nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss
    multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss
    binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp upsample_nearest1d
    _upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d
    _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa
    upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa""".split()
FP32_OUTPUT = """prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm
    linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList""".split()
"""Ops with a dtype= argument: unless it is given, a low-precision input gives an fp32 result
(CUDA's fp32_set_opt_dtype: the op computes in fp32 without casting its input first)."""
FP32_APPENDED = {"norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}
"""Overloads without a dtype argument, run as their dtype overload with fp32 (fp32_append_dtype)."""
PROMOTE = "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add".split()
"""Ops of several floating inputs: all run in the widest of their dtypes (fp32 if any is fp32)."""

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


def _eligible(value) -> bool:
    """A tensor autocast casts: floating (not float64) and on neuron, as CUDA's is_eligible."""
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64
            and value.device.type == "neuron")


def _tensors(values):
    for value in values:
        if type(value) in (list, tuple):
            yield from _tensors(value)
        elif isinstance(value, torch.Tensor):
            yield value


def _cast(value, dtype):
    """Eligible tensors cast to `dtype`; everything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if _eligible(value) and value.dtype != dtype else value
    if type(value) in (list, tuple):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _casting(op, dtype_of):
    """A kernel that casts every eligible argument to `dtype_of(args, kwargs)` and runs `op`."""
    def autocast_kernel(*args, **kwargs):
        dtype = dtype_of(args, kwargs)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})

    return autocast_kernel


def _lower(args, kwargs):
    return torch.get_autocast_dtype("neuron")


def _fp32(args, kwargs):
    return torch.float32


def _widest(args, kwargs):
    """CUDA's promote_type: fp32 once an eligible argument is fp32, the autocast dtype while every
    one so far has it; another low dtype first (fp16 under bf16 autocast) is CUDA's error."""
    low = current = _lower(args, kwargs)
    for tensor in _tensors((*args, *kwargs.values())):
        if not _eligible(tensor):
            continue
        if current == torch.float32 or tensor.dtype == torch.float32:
            current = torch.float32
        elif tensor.dtype != low:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


def _all_arguments(op, args, kwargs) -> dict:
    """Every argument of `op`'s schema by name, in order, defaults filled in."""
    arguments = op._schema.arguments
    return {a.name: args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
            for i, a in enumerate(arguments)}


def _call(op, values: dict):
    """Run `op` on arguments by name, keyword-only ones passed by keyword."""
    keyword = {a.name for a in op._schema.arguments if a.kwarg_only}
    with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
        return op(*(v for k, v in values.items() if k not in keyword),
                  **{k: v for k, v in values.items() if k in keyword})


def _first(values: dict):
    return next(iter(values.values()))


def _fp32_output(op):
    """Run `op` with dtype=float32 when its first argument is eligible and no dtype was given."""
    def autocast_kernel(*args, **kwargs):
        values = _all_arguments(op, args, kwargs)
        if _eligible(_first(values)) and values["dtype"] is None:
            values["dtype"] = torch.float32
        return _call(op, values)

    return autocast_kernel


def _fp32_appended(op, typed):
    """Run `typed` (op's overload with a dtype) with float32, or the input's dtype if not eligible."""
    def autocast_kernel(*args, **kwargs):
        values = _all_arguments(op, args, kwargs)
        values["dtype"] = torch.float32 if _eligible(_first(values)) else _first(values).dtype
        return _call(typed, values)

    return autocast_kernel


def _overload(qualified: str):
    name, _, overload = qualified.partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def kernels() -> dict:
    """Qualified op name -> its autocast kernel, one per AutocastCUDA registration."""
    found = {}
    for names, dtype_of in ((LOWER_PRECISION, _lower), (FP32, _fp32), (PROMOTE, _widest)):
        found.update({name: _casting(_overload(name), dtype_of) for name in names})
    found.update({name: _fp32_output(_overload(name)) for name in FP32_OUTPUT})
    for name, typed in FP32_APPENDED.items():
        found[name] = _fp32_appended(_overload(name), _overload(typed))
    found.update({name: _refused(name) for name in BANNED})
    return found


def register(library: torch.library.Library) -> int:
    """Register the casting kernels on the AutocastPrivateUse1 key; returns how many overloads."""
    found = kernels()
    for name, kernel in found.items():
        library.impl(name, kernel, "AutocastPrivateUse1")
    return len(found)
