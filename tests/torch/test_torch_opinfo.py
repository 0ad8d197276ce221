"""PyTorch's own op database (OpInfo) on neuron: each op with float32 samples, run on CPU and on
the device from the same inputs, must give CPU's bits or a TrnsimError. Slow (about a minute):
`python -m pytest -m slow tests/torch/test_torch_opinfo.py`. Needs PyTorch's test helpers, which
import `expecttest` (skipped without it)."""

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import trnsim

SKIPPED = {
    **{name: "uninitialized memory" for name in ("empty", "empty_like", "new_empty", "new_empty_strided",
                                                  "empty_strided", "empty_permuted")},
    "as_strided.partial_views": "a view's .to() copies only the view, as on CUDA: the sample reads past it",
    "tensor_split": "its indices must stay on CPU, as on CUDA",
    "linalg.lstsq": "the gelsy driver is not deterministic on CPU itself",
}
CUDA_ONLY = ("jiterator_",)
SAMPLES = 4


def _name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _on_device(value):
    return value.to("neuron") if isinstance(value, torch.Tensor) and value.layout == torch.strided else value


def _bits(value):
    if isinstance(value, torch.Tensor):
        value = value.cpu().resolve_conj().resolve_neg()
        return torch.view_as_real(value) if value.is_complex() else value
    return value


def _same(expected, got) -> bool:
    flat_expected, flat_got = tree_flatten(expected)[0], tree_flatten(got)[0]
    if len(flat_expected) != len(flat_got):
        return False
    for a, b in zip(map(_bits, flat_expected), map(_bits, flat_got), strict=True):
        if isinstance(a, torch.Tensor):
            if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape:
                return False
            if not ((a == b) | (a.isnan() & b.isnan()) if a.is_floating_point() else a == b).all():
                return False
        elif a != b and a == a:  # NaN scalars are equal here
            return False
    return True


def _gives_cpus_bits_or_a_trnsim_error(op) -> bool:
    for sample in list(op.sample_inputs("cpu", torch.float32))[:SAMPLES]:
        torch.manual_seed(0)
        expected = op(sample.input, *sample.args, **sample.kwargs)
        torch.manual_seed(0)
        try:
            got = op(_on_device(sample.input), *tree_map(_on_device, sample.args),
                     **tree_map(_on_device, sample.kwargs))
        except trnsim.TrnsimError:
            continue
        if not _same(expected, got):
            return False
    return True


@pytest.mark.slow
def test_every_op_gives_cpus_bits_or_a_trnsim_error():
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import op_db  # 4 s: only when run

    ops = [op for op in op_db if torch.float32 in op.dtypes and not op.name.startswith(CUDA_ONLY)
           and _name(op) not in SKIPPED]
    assert len(ops) > 600
    assert [_name(op) for op in ops if not _gives_cpus_bits_or_a_trnsim_error(op)] == []
