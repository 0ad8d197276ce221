"""The op table of the neuron device: which aten ops it implements, and the rule that runs each.

An op's *family* (matmul, norm, elementwise, ...) says how the device times it and which precision
rule applies. Values are computed on the emulator's CPU buffers with the same aten kernels, so fp32
results are bitwise equal to CPU; matmul-family ops on bf16/fp16 accumulate in fp32 and round once,
as TensorE does into PSUM. Aten ops not in the table fall back to CPU (`trnsim.torch.fallback`).
"""

from __future__ import annotations

import functools

import torch

from trnsim.errors import UnsupportedError
from trnsim.torch import attention, fallback, precision, profiler
from trnsim.torch.device import RUN_WHOLE, placement
from trnsim.torch.tensor import (
    NeuronTensor,
    device_of,
    is_sequence_lengths,
    unwrap,
    unwrap_args,
    unwrap_kwargs,
    wrap,
)

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

LOW_PRECISION = (torch.bfloat16, torch.float16)
FP32_ACCUMULATE = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "convolution",
                   "convolution_backward"}


def plain(func, args, kwargs):
    """The default kernel: the same aten op on the emulator's CPU buffers (`_op` skips the
    OpOverload's own Python call frame)."""
    return func._op(*args, **kwargs)


def fp32_accumulate(func, args, kwargs):
    """bf16/fp16 matmuls and convolutions: multiply and accumulate in fp32, round the result once."""
    low = _low_precision_dtype(args)
    if low is None:
        return func(*args, **kwargs)
    wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
    return _round_outputs(func(*wide, **kwargs), low)


def _low_precision_dtype(args) -> torch.dtype | None:
    """bf16 or fp16 when every tensor operand has that dtype, else None. Operands of mixed dtypes
    go to CPU's kernel unwidened, which refuses them with its own error (widening first let an
    fp32 operand through, and named float where the operand was bf16)."""
    dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor)}
    low = dtypes.pop() if len(dtypes) == 1 else None
    return low if low in LOW_PRECISION else None


def _round_outputs(value, dtype):
    if isinstance(value, torch.Tensor):
        return precision.round_to(value, dtype) if value.dtype == torch.float32 else value
    if type(value) in (list, tuple):
        return type(value)(_round_outputs(v, dtype) for v in value)
    return value


def rounded_to_copy(func, args, kwargs):
    """`_to_copy`: an fp32 -> bf16 cast rounds as the engines do (stochastically when switched on)."""
    dtype = kwargs.get("dtype")
    if dtype is not None and precision.rounds_stochastically(args[0].dtype, dtype):
        rest = {k: v for k, v in kwargs.items() if k != "dtype"}
        return func(precision.round_to(args[0], dtype), *args[1:], **rest)
    return func(*args, **kwargs)


def rounded_copy(func, args, kwargs):
    """`copy_(dst, src)` / `_copy_from(src, dst)`: a narrowing copy rounds as `rounded_to_copy` does."""
    dst_first = func._opname in ("copy_", "copy")  # copy: the functional copy_ compiled graphs use
    dst, src = (args[0], args[1]) if dst_first else (args[1], args[0])
    if precision.rounds_stochastically(src.dtype, dst.dtype):
        src = precision.round_to(src, dst.dtype)
        args = (dst, src, *args[2:]) if dst_first else (src, dst, *args[2:])
    return func(*args, **kwargs)


def kernel_for(func):
    """The emulator kernel for an aten overload, working on CPU buffers (eager and compiled paths)."""
    name = func._opname
    if func.namespace != "aten":
        return plain
    if name == "_to_copy":
        return rounded_to_copy
    if name in ("copy_", "copy", "_copy_from"):
        return rounded_copy
    if name in FP32_ACCUMULATE and not func._schema.is_mutable:
        return fp32_accumulate
    if name == "histc":
        return histc
    if name in CUDA_ONLY:
        return cuda_only
    if name not in FAMILIES:
        return fallback.rule(plain)
    return plain


INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _histc_arguments(input, bins=100, min=0, max=0, *, out=None):
    return input, bins, min, max, out


def histc(func, args, kwargs):
    """`histc` of an integer tensor, which CUDA computes and CPU's kernel refuses (Hugging Face MoE
    layers count tokens per expert this way on any device but CPU): CUDA's definition in exact
    integer arithmetic, so counts equal CPU's float histc of the same small values. Other dtypes
    go to CPU's kernel."""
    values, bins, low, high, out = _histc_arguments(*args, **kwargs)
    if values.dtype not in INTEGER_DTYPES:
        return func(*args, **kwargs)
    counts = _integer_histogram(values.reshape(-1).long(), bins, int(low), int(high)).to(values.dtype)
    return counts if out is None else out.resize_(counts.shape).copy_(counts)


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


def _owners(args, kwargs) -> dict:
    """Caller tensors by the identity of the buffer they hand the emulator (for in-place results)."""
    owners = {}
    for value in (*args, *kwargs.values()):
        items = value if type(value) in (list, tuple) else (value,)
        for item in items:
            if type(item) is NeuronTensor:
                owners[id(item._elem)] = item
            elif isinstance(item, torch.Tensor):
                owners[id(item)] = item
    return owners


_WRAPPER_ONLY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.PythonTLSSnapshot)
_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_SET_LAYOUT = torch.ops.aten.set_.source_Storage_storage_offset


def _sync_layout(owner, buffer):
    """After an op that changed its buffer's layout in place (unsqueeze_, t_, resize_, set_, out=
    resized), give the caller's tensor the same sizes, strides and offset.

    The wrapper's layout lives in C++ and is checked against its own (data-less) storage, which
    was sized for the shape it was made with. Meta's `set_` kernel, run below the Python key on
    that storage, rewrites the layout and grows the storage's size where the new layout needs it,
    so a tensor can grow in place (resize_ larger, out= of another shape, deepcopy) as on CPU.
    """
    layout = (buffer.shape, buffer.stride(), buffer.storage_offset())
    if type(owner) is not NeuronTensor or (owner.shape, owner.stride(), owner.storage_offset()) == layout:
        return owner
    with torch._C._ExcludeDispatchKeyGuard(_WRAPPER_ONLY), torch._C._AutoDispatchBelowAutograd():
        _SET_LAYOUT.redispatch(_META, owner, torch.Tensor.untyped_storage(owner), layout[2], *layout[:2])
    return owner


def _rewrap(value, owners: dict):
    if isinstance(value, torch.Tensor):
        owner = owners.get(id(value))
        return _sync_layout(owner, value) if owner is not None else NeuronTensor(value)
    if type(value) in (list, tuple):
        return type(value)(_rewrap(v, owners) for v in value)
    return value


def _finish(func, args, kwargs, uargs, out):
    """Turn CPU results into what the caller expects and charge the op's device time."""
    active = profiler.current()
    if active is not None:
        active.record(func, uargs, out)
    device = kwargs.get("device")
    if device is not None:
        device = torch.device(device)
        if device.type != "neuron":
            return out
        device = placement(device)
    if _is_mutable(func):
        return _rewrap(out, _owners(args, kwargs))
    if func.is_view and torch.is_inference_mode_enabled() and not args[0].is_inference():
        # A view of a normal tensor is a normal tensor, as on CPU: PyTorch then shares the base's
        # version counter with it, which a wrapper made in inference mode refuses (it raised).
        with torch.inference_mode(False):
            return wrap(out, device or device_of(args))
    return wrap(out, device or device_of(args))


@functools.cache
def _is_mutable(func) -> bool:
    return func._schema.is_mutable


def eager_rule(kernel):
    """The rule for neuron tensors: unwrap, run `kernel` on the buffers, wrap the results."""

    def rule(func, args, kwargs):
        uargs = unwrap_args(args, func)
        return _finish(func, args, kwargs, uargs, kernel(func, uargs, unwrap_kwargs(kwargs, func)))

    return rule


CPU_INDEX_OPS = {"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put"}


def index_rule(kernel):
    """Indexing ops: the index tensors may be on CPU (`x[torch.tensor([1, 3])]`), as CUDA allows."""

    def rule(func, args, kwargs):
        uargs = [unwrap(args[0], func), unwrap(args[1], func, allow_cpu=True), *unwrap_args(args[2:], func)]
        return _finish(func, args, kwargs, uargs, kernel(func, uargs, unwrap_kwargs(kwargs, func)))

    return rule


CPU_ARGUMENT_OPS = {"_pack_padded_sequence_backward", "lstm", "gru", "rnn_tanh", "rnn_relu"}
"""Ops whose lengths / batch_sizes argument is a CPU tensor by PyTorch's own rule (packed sequences)."""


def _unwrap_lengths_on_cpu(args, func) -> list:
    return [unwrap(a, func, allow_cpu=is_sequence_lengths(a)) for a in args]


def cpu_argument_rule(kernel):
    def rule(func, args, kwargs):
        uargs = _unwrap_lengths_on_cpu(args, func)
        return _finish(func, args, kwargs, uargs, kernel(func, uargs, unwrap_kwargs(kwargs, func)))

    return rule


def packing_rule(func, args, kwargs):
    """`_pack_padded_sequence`: the lengths come from CPU and batch_sizes stays there, as on CUDA."""
    uargs = _unwrap_lengths_on_cpu(args, func)
    data, batch_sizes = plain(func, uargs, kwargs)
    return _finish(func, args, kwargs, uargs, data), batch_sizes


def copy_rule(func, args, kwargs):
    """`copy_` / `_copy_from`: the one place where a full CPU tensor may meet a neuron tensor."""
    uargs = [unwrap(a, func, allow_cpu=True) for a in args]
    return _finish(func, args, kwargs, uargs, rounded_copy(func, uargs, kwargs))


def item_rule(func, args, kwargs):
    """`.item()`: the value leaves the device."""
    return args[0]._elem.item()


def resolved_view_rule(func, args, kwargs):
    """`conj()` / `_neg_view`: a lazy conjugate or negative bit on the buffer would be ignored by
    the kernels, which run below the dispatch keys that honour it (`(x.conj() * x)` came out as
    `x * x`), so the view is made as a tensor of its own: its values, not a view of the base."""
    elem = unwrap(args[0], func)
    out = elem.conj_physical() if func._opname == "_conj" else torch.neg(elem)
    return _finish(func, args, kwargs, [elem], out)


def attention_rule(func, args, kwargs):
    """SDPA arriving whole (inference_mode skips the Autograd-key kernel): the kernel CPU picks,
    as with autograd on, not the composite's unfused math path."""
    return attention.scaled_dot_product_attention(*args, **kwargs)


def shallow_copy_rule(func, args, kwargs):
    """`_has_compatible_shallow_copy_type` (Module.to under inference_mode asks it): a neuron and a
    CPU tensor are not, two neuron tensors are, as for CUDA."""
    return type(args[0]) is NeuronTensor and type(args[1]) is NeuronTensor


def decompose_rule(func, args, kwargs):
    """A composite op that arrived whole (autograd off, e.g. inference_mode): run its decomposition,
    whose parts come back through the op table, as CPU runs the same decomposition."""
    return func.decompose(*args, **kwargs)


def resolve(func):
    """The rule that runs `func` on neuron tensors (NeuronTensor caches it per overload)."""
    name = func._opname
    if func.namespace == "aten" and name in ("copy_", "_copy_from"):
        return copy_rule
    if func.namespace == "aten" and name == "_local_scalar_dense":
        return item_rule
    if func.namespace == "aten" and name in ("_conj", "_neg_view"):
        return resolved_view_rule
    if func.namespace == "aten" and name == "scaled_dot_product_attention":
        return attention_rule
    if func.namespace == "aten" and name == "_has_compatible_shallow_copy_type":
        return shallow_copy_rule
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
    if func.namespace == "aten" and name not in FAMILIES and name not in RUN_WHOLE and composite:
        return decompose_rule
    if func.namespace == "aten" and name in CPU_INDEX_OPS:
        return index_rule(kernel_for(func))
    if func.namespace == "aten" and name == "_pack_padded_sequence":
        return packing_rule
    if func.namespace == "aten" and name in CPU_ARGUMENT_OPS:
        return cpu_argument_rule(kernel_for(func))
    return eager_rule(kernel_for(func))
