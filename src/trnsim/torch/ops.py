"""The op table of the neuron device: which aten ops it implements, and the rules that differ from
CPU's.

An op's *family* (matmul, norm, elementwise, ...) says how the device times it and which precision
rule applies. The C++ core (`trnsim.torch.native`) computes values with CPU's aten kernels on the
tensors' memory, so fp32 results are bitwise equal to CPU; FP32_ACCUMULATE ops on bf16/fp16
accumulate in fp32 and round once, as TensorE does into PSUM. Aten ops not in the table run the
same way but are counted as fallbacks (`trnsim.torch.fallback`): they are not timed.
"""

from __future__ import annotations

import torch

from trnsim.errors import UnsupportedError

FAMILIES: dict[str, str] = {}


def _family(name: str, ops: str) -> None:
    for op in ops.split():
        if op in FAMILIES:
            raise ValueError(f"aten op {op} listed in families {FAMILIES[op]} and {name}")
        FAMILIES[op] = name


_family("matmul", "mm addmm bmm baddbmm addbmm addmv mv dot vdot outer _addmm_activation _grouped_mm")
_family("conv", "convolution convolution_backward _convolution")
_family("norm", """native_layer_norm native_layer_norm_backward native_batch_norm native_batch_norm_backward
    _native_batch_norm_legit _native_batch_norm_legit_no_training _native_batch_norm_legit_functional
    native_group_norm native_group_norm_backward _fused_rms_norm _fused_rms_norm_backward
    _weight_norm_interface _weight_norm_interface_backward""")

CUDA_ONLY = frozenset("""batch_norm_stats batch_norm_elemt batch_norm_backward_reduce
    batch_norm_backward_elemt batch_norm_gather_stats batch_norm_gather_stats_with_counts""".split())
"""Aten ops with CUDA kernels only (SyncBatchNorm's): the device runs ops on CPU kernels, which
these lack, so they are refused by name (they raised PyTorch's "no CPU kernel" error)."""
_family("rnn", "lstm gru rnn_tanh rnn_relu")  # whole ops on the buffers (trnsim.torch.rnn)
_family("embedding", "embedding embedding_dense_backward _embedding_bag _embedding_bag_backward")
_family("attention", """_scaled_dot_product_flash_attention_for_cpu
    _scaled_dot_product_flash_attention_for_cpu_backward _fused_sdp_choice
    _scaled_dot_product_attention_math""")
_family("activation", """relu relu_ gelu gelu_backward silu silu_ silu_backward sigmoid sigmoid_
    sigmoid_backward tanh tanh_ tanh_backward threshold_backward _softmax _softmax_backward_data
    _log_softmax _log_softmax_backward_data _safe_softmax hardtanh hardtanh_ hardtanh_backward leaky_relu
    leaky_relu_backward elu elu_backward softplus softplus_backward mish mish_backward hardswish
    hardswish_backward hardsigmoid hardsigmoid_backward glu glu_backward log_sigmoid_forward
    log_sigmoid_backward""")
_family("loss", """mse_loss mse_loss_backward nll_loss_forward nll_loss_backward nll_loss2d_forward
    nll_loss2d_backward binary_cross_entropy binary_cross_entropy_backward
    binary_cross_entropy_with_logits smooth_l1_loss smooth_l1_loss_backward huber_loss
    huber_loss_backward _ctc_loss _ctc_loss_backward""")
_family("reduction", """sum mean amax amin max min argmax argmin prod var var_mean std std_mean norm
    linalg_vector_norm logsumexp cumsum cumsum_ cumprod any all count_nonzero _cdist_forward
    equal allclose isclose _unique2 unique_consecutive unique_dim bincount histc searchsorted bucketize""")
_family("indexing", """index index_put index_put_ _index_put_impl_ index_select index_add index_add_
    index_copy index_copy_ gather scatter scatter_ scatter_add scatter_add_ masked_fill masked_fill_
    masked_scatter masked_scatter_ masked_select nonzero where take topk sort argsort embedding_renorm_
    _unsafe_index _unsafe_index_put one_hot tril tril_ triu triu_ flip roll repeat repeat_interleave
    cat stack constant_pad_nd index_fill_ index_fill select_backward slice_backward
    select_scatter slice_scatter diagonal_scatter as_strided_scatter unfold_backward max_pool2d_with_indices
    max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward _adaptive_avg_pool2d
    _adaptive_avg_pool2d_backward upsample_nearest2d upsample_bilinear2d
    upsample_nearest2d_backward upsample_bilinear2d_backward _pack_padded_sequence
    _pack_padded_sequence_backward im2col col2im""")
_family("view", """view _unsafe_view reshape t transpose permute expand unsqueeze squeeze slice select
    split split_with_sizes unbind narrow as_strided alias detach clone contiguous _reshape_alias
    unsqueeze_ squeeze_ t_ transpose_ as_strided_ swapdims_ detach_
    view_as_real view_as_complex unfold diagonal chunk lift_fresh lift_fresh_copy movedim _to_copy copy
    copy_ _copy_from
    _local_scalar_dense resize_ set_ _has_compatible_shallow_copy_type is_same_size
    _nested_tensor_from_mask_left_aligned""")
_family("elementwise", """add add_ sub sub_ mul mul_ div div_ neg neg_ pow pow_ exp exp_ log log_ sqrt
    sqrt_ rsqrt rsqrt_ abs abs_ sign sign_ clamp clamp_ clamp_min clamp_min_ clamp_max clamp_max_
    minimum maximum reciprocal reciprocal_ addcmul addcmul_ addcdiv addcdiv_ lerp lerp_ fill fill_
    zero_ eq ne lt le gt ge logical_and logical_or logical_not logical_xor bitwise_and bitwise_or
    bitwise_not bitwise_xor isnan isinf isfinite floor floor_ ceil ceil_ round round_ trunc trunc_
    frac sin cos erf erf_ erfinv exp2 expm1 log1p log2 log10 remainder fmod floor_divide rsub
    nan_to_num nan_to_num_ square cosh sinh atan atan2 acos asin tan triu_indices tril_indices
    ones_like zeros_like empty_like full_like rand_like randn_like randint_like
    new_empty new_empty_strided new_zeros new_ones new_full alias_copy bernoulli bernoulli_ uniform_
    normal_ random_ exponential_ multinomial native_dropout native_dropout_backward dropout _fused_dropout
    heaviside xlogy logit sgn sgn_ logical_and_ logical_or_ logical_not_ logical_xor_ bitwise_and_
    bitwise_or_ eq_ ne_ lt_ le_ gt_ ge_ isin isneginf isposinf""")
_family("factory", """arange zeros ones full empty empty_strided scalar_tensor rand randn randint randperm
    linspace logspace eye empty_permuted""")
_family("foreach", """_foreach_add _foreach_add_ _foreach_sub _foreach_sub_ _foreach_mul _foreach_mul_
    _foreach_div _foreach_div_ _foreach_addcmul _foreach_addcmul_ _foreach_addcdiv _foreach_addcdiv_
    _foreach_sqrt _foreach_sqrt_ _foreach_lerp _foreach_lerp_ _foreach_neg _foreach_neg_ _foreach_norm
    _foreach_maximum_ _foreach_minimum_ _foreach_copy_ _foreach_zero_ _foreach_pow _foreach_pow_
    _foreach_reciprocal _foreach_reciprocal_ _foreach_sign _foreach_abs _foreach_exp _foreach_exp_
    _foreach_clamp_min_ _foreach_clamp_max_ _foreach_max _fused_adamw_ _fused_adam_
    _amp_foreach_non_finite_check_and_unscale_ _amp_update_scale_""")

FP32_ACCUMULATE = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "convolution",
                   "convolution_backward"}


INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def histc(values: torch.Tensor, bins: int = 100, low=0, high=0) -> torch.Tensor:
    """`histc` of an integer tensor, which CUDA computes and CPU's kernel refuses (Hugging Face MoE
    layers count tokens per expert this way on any device but CPU): CUDA's definition in exact
    integer arithmetic, so counts equal CPU's float histc of the same small values. Other dtypes
    go to CPU's kernel."""
    if values.dtype not in INTEGER_DTYPES:
        return torch.histc(values, bins, low, high)
    return _integer_histogram(values.reshape(-1).long(), bins, int(low), int(high)).to(values.dtype)


def _integer_histogram(values: torch.Tensor, bins: int, low: int, high: int) -> torch.Tensor:
    """CUDA's histc on int64 values: min == max means the data's range (widened by one each side if
    still empty); value v in [low, high] counts in bin (v - low) * bins // (high - low), the top edge
    in the last bin."""
    if bins <= 0:
        raise RuntimeError(f"torch.histc(): bins must be > 0, but got {bins}")
    if low == high and values.numel() > 0:
        low, high = int(values.min()), int(values.max())
    if low == high:
        low, high = low - 1, high + 1
    if low > high:
        raise RuntimeError("torch.histc(): max must be larger than min")
    kept = values[(values >= low) & (values <= high)]
    index = ((kept - low) * bins).div(high - low, rounding_mode="floor").clamp_max(bins - 1)
    return torch.bincount(index, minlength=bins)


def cuda_only(func, args, kwargs):
    raise UnsupportedError(f"{func} has CUDA kernels only (SyncBatchNorm uses it); neuron runs CPU kernels",
                           what=str(func), hint="use nn.BatchNorm (statistics per rank) or nn.GroupNorm")
