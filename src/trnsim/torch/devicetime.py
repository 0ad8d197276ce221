"""Device time of one aten op on a NeuronCore: the op is mapped to calls of the op-cost library
(`trnsim.cost`: matmul, fused attention, elementwise, norm, reduction, copy) at its shapes, the
same costs the planner uses. Nothing here knows a clock or a bandwidth.

    op_time_s("aten.mm.default", (((256, 512), "float32"), ((512, 1024), "float32")),
              (((256, 1024), "float32"),), target="trn2")

A signature lists the tensor arguments as (shape, dtype name); a list argument (cat, _foreach_*)
is a tuple of those. Times are cached per (op, signature, target, lnc).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from trnsim import cost
from trnsim.core.runtime import current as current_runtime
from trnsim.errors import UnsupportedError
from trnsim.torch.ops import FAMILIES

# torch dtypes as the device stores them (no 64-bit types on the engines).
DEVICE_DTYPE = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16",
                "float64": "float32", "int64": "int32", "int32": "int32", "int16": "int16", "int8": "int8",
                "uint8": "uint8", "bool": "uint8"}
ATTENTION_BACKWARD_FACTOR = 2.5
"""Flash-attention backward over forward: five matmuls (S recomputed, dV, dP, dQ, dK) to the
forward's two (Dao, FlashAttention-2, 2023, section 3.1.2), charged as 2.5 fused forwards."""


@dataclass(frozen=True)
class Launch:
    """One call of the op-cost library standing for (part of) an aten op: the family (a key of
    `cost.FAMILIES`), its sizes, dtype and keyword options, and how many times it runs."""

    family: str
    sizes: tuple
    dtype: str
    count: float = 1
    options: tuple = ()


def _dtype(name: str) -> str:
    return DEVICE_DTYPE.get(name, "float32")


def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def _sizes(*values) -> tuple:
    """An empty dim (a [0, 4] operand) counts as 1: the launch still costs its overhead."""
    return tuple(max(1, int(v)) for v in values)


def _matmul(m: int, k: int, n: int, dtype: str, count: int = 1) -> Launch:
    return Launch("matmul", _sizes(m, k, n), _dtype(dtype), count)


def _stream(op: str, sizes: list[int], dtype: str) -> Launch:
    largest = max(sizes)
    inputs = max(1, sum(1 for n in sizes if n == largest))
    engine = "scalar" if op == "activation" else "vector"
    return Launch("elementwise", _sizes(largest, inputs), _dtype(dtype), options=(("engine", engine),))


def _rows(shape, dtype: str, write_rows: bool) -> Launch:
    cols = max(shape[-1] if shape else 1, 1)
    return Launch("norm" if write_rows else "reduction", _sizes(_numel(shape) // cols, cols), _dtype(dtype))


def _copy(elements: int, dtype: str) -> Launch:
    return Launch("copy", _sizes(elements), _dtype(dtype))


def is_spec(entry) -> bool:
    """A (shape, dtype name) entry, as opposed to the tuple of entries of a list argument."""
    return len(entry) == 2 and isinstance(entry[1], str)


def _flat(signature) -> list[tuple]:
    """(shape, dtype) of every tensor, list arguments flattened."""
    found = []
    for entry in signature:
        found.extend([entry] if is_spec(entry) else entry)
    return found


def _matmul_launches(name: str, inputs, outputs) -> list[Launch]:
    tensors = [(s, d) for s, d in inputs if len(s) >= 1]
    with_bias = name in ("addmm", "baddbmm", "addbmm", "addmv", "_addmm_activation")
    matrices = tensors[1:3] if with_bias else tensors[:2]
    (a_shape, dtype), (b_shape, _) = matrices
    k = a_shape[-1]
    m = a_shape[-2] if len(a_shape) >= 2 else 1
    n = b_shape[-1] if len(b_shape) >= 2 else 1
    batch = _numel(a_shape[:-2]) if len(a_shape) > 2 else 1
    return [_matmul(m, k, n, dtype, batch)]


def _conv_launches(name: str, inputs, outputs) -> list[Launch]:
    shapes = [s for s, _ in inputs]
    dtype = inputs[0][1]
    if name == "convolution_backward":
        grad_out, image, weight = shapes[:3]
        out_shape = grad_out
    else:
        image, weight = shapes[:2]
        out_shape = outputs[0][0]
    groups = max(1, image[1] // weight[1])
    rows = out_shape[0] * _numel(out_shape[2:])
    depth = weight[1] * _numel(weight[2:])
    channels = weight[0] // groups
    forward = _matmul(rows, depth, channels, dtype, groups)
    if name != "convolution_backward":
        return [forward]
    return [_matmul(rows, channels, depth, dtype, groups), _matmul(depth, rows, channels, dtype, groups)]


def _attention_launches(name: str, inputs, outputs) -> list[Launch]:
    """One fused flash-attention launch (the backward as 2.5 of them). Shapes alone do not say
    whether a mask was causal, so every query sees every key."""
    if name == "_fused_sdp_choice":
        return []
    offset = 1 if name.endswith("backward") else 0
    (q_shape, dtype), (k_shape, _) = inputs[offset], inputs[offset + 1]
    heads, length, depth, keys = _numel(q_shape[:-2]), q_shape[-2], q_shape[-1], k_shape[-2]
    count = ATTENTION_BACKWARD_FACTOR if offset else 1
    kv_heads = _numel(k_shape[:-2])
    options = (("causal", False),) + ((("kv_heads", kv_heads),) if kv_heads and heads % kv_heads == 0 else ())
    return [Launch("attention", _sizes(1, heads, length, keys, depth), _dtype(dtype), count, options)]


def _rowwise_launches(name: str, inputs, outputs) -> list[Launch]:
    shape, dtype = inputs[0]
    out_numel = _numel(outputs[0][0]) if outputs else 0
    return [_rows(shape, dtype, out_numel >= _numel(shape))]


def _stream_launches(op: str):
    def launches(name: str, inputs, outputs) -> list[Launch]:
        operands = inputs or outputs
        if not operands:
            return []
        dtype = (outputs or inputs)[0][1]
        return [_stream(op, [_numel(shape) for shape, _ in operands], dtype)]

    return launches


def _movement_launches(name: str, inputs, outputs) -> list[Launch]:
    if not outputs:
        return []
    shape, dtype = outputs[0]
    return [_copy(_numel(shape), dtype)]


def _view_launches(name: str, inputs, outputs) -> list[Launch]:
    """Views and metadata cost nothing on the device; copies and casts move the data once."""
    if name in ("clone", "contiguous", "copy_", "copy", "_copy_from", "lift_fresh_copy"):
        return _movement_launches(name, inputs, outputs) if outputs else \
            [_copy(_numel(inputs[0][0]), inputs[0][1])]
    if name == "_to_copy" and outputs and inputs:
        if outputs[0][1] != inputs[0][1]:
            return [_stream("tensor", [_numel(inputs[0][0])], outputs[0][1])]
        return _movement_launches(name, inputs, outputs)
    return []


def _foreach_launches(name: str, inputs, outputs) -> list[Launch]:
    lists = [entry for entry in inputs if not is_spec(entry)]
    if not lists:
        return []
    launches = []
    for members in zip(*lists, strict=False):
        launches.append(_stream("tensor", [_numel(s) for s, _ in members], members[0][1]))
    return launches


RNN_GATES = {"lstm": 4, "gru": 3}
"""Gate blocks per layer (the weights' first dimension over the hidden size); plain RNNs have 1."""


def _rnn_launches(name: str, inputs, outputs) -> list[Launch]:
    """A recurrent layer stack: per layer and direction, the input projection of every token as one
    matmul, one hidden-state matmul per time step, and the gate arithmetic (ScalarE for the
    sigmoids and tanhs, VectorE for the products and sums). The weights are the 2-D inputs, in
    pairs (w_ih, w_hh); hx's middle dimension is the batch."""
    (x_shape, dtype), gates = inputs[0], RNN_GATES.get(name, 1)
    weights = [shape for shape, _ in inputs[1:] if len(shape) == 2]
    hidden = next(shape for shape, _ in inputs[1:] if len(shape) == 3)
    tokens = max(1, _numel(x_shape) // max(1, x_shape[-1]))
    batch = max(1, hidden[1])
    launches, k = [], 0
    while k + 1 < len(weights):
        w_ih, w_hh = weights[k], weights[k + 1]
        launches.append(_matmul(tokens, w_ih[1], w_ih[0], dtype))
        launches.append(_matmul(batch, w_hh[1], w_hh[0], dtype, max(1, tokens // batch)))
        launches.append(_stream("activation", [tokens * w_ih[0]], dtype))
        launches.append(_stream("tensor", [tokens * w_ih[0] // gates] * 2, dtype))
        projected = k + 2 < len(weights) and weights[k + 2][0] != w_ih[0]  # LSTM proj_size: w_hr
        k += 3 if projected else 2
    return launches


RECIPES = {
    "matmul": _matmul_launches, "conv": _conv_launches, "attention": _attention_launches,
    "norm": _rowwise_launches, "reduction": _rowwise_launches, "loss": _rowwise_launches,
    "activation": _stream_launches("activation"), "elementwise": _stream_launches("tensor"),
    "embedding": _movement_launches, "indexing": _movement_launches, "factory": _movement_launches,
    "view": _view_launches, "foreach": _foreach_launches, "rnn": _rnn_launches,
}
"""Family -> (op name, input signature, output signature) -> kernel launches."""


def launches(op: str, inputs: tuple, outputs: tuple) -> list[Launch]:
    """The built-in kernel launches that stand for aten op `op` (e.g. "aten.mm.default")."""
    if op.endswith(".backward"):  # trnsim.torch.rnn's record of a backward: gradients of inputs
        forward = launches(op.removesuffix(".backward"), inputs, outputs)  # and of weights, 2x
        return [replace(launch, count=2 * launch.count) for launch in forward]
    name = op.split(".")[1] if op.startswith("aten.") else op
    family = FAMILIES.get(name)
    if family is None:
        return []
    flat_inputs = inputs if family == "foreach" else tuple(_flat(inputs))
    return RECIPES[family](name, flat_inputs, tuple(_flat(outputs)))


TENSOR_ENGINE_FAMILIES = ("matmul", "attention")
FLOAT_DTYPES = ("float32", "bfloat16", "float16")


def costable(launch: Launch) -> bool:
    """Whether the op-cost library can cost `launch`: the Tensor Engine takes only float operands,
    so an integer matmul (which the device would have to run some other way) has no kernel."""
    return launch.family not in TENSOR_ENGINE_FAMILIES or launch.dtype in FLOAT_DTYPES


def is_free(op: str) -> bool:
    """Ops that cost the device nothing: views and metadata, and host-side decisions."""
    name = op.split(".")[1] if op.startswith("aten.") else op
    return FAMILIES.get(name) == "view" or name == "_fused_sdp_choice"


def launch_time_s(launch: Launch, target: str, lnc: int) -> float:
    """Seconds of one launch: the op-cost library's fast tier, times the launch's count."""
    found = cost.op(launch.family, *launch.sizes, dtype=launch.dtype, target=target, lnc=lnc,
                    **dict(launch.options))
    return found.seconds * launch.count


@functools.lru_cache(maxsize=65536)
def op_time_s(op: str, inputs: tuple, outputs: tuple, target: str = "trn2", lnc: int = 1) -> float:
    """Seconds aten op `op` keeps one NeuronCore (or one logical core, lnc=2) of `target` busy;
    UnsupportedError for an op no kernel costs (a profile lists those as untimed instead)."""
    found = launches(op, inputs, outputs)
    for launch in found:
        if not costable(launch):
            raise UnsupportedError(f"{op} of integer operands: the Tensor Engine takes float operands "
                                   f"only, so no kernel times it", what=op)
    return sum(launch_time_s(launch, target, lnc) for launch in found)


current_runtime().on_reset(op_time_s.cache_clear)  # the cache is the runtime's: reset empties it
