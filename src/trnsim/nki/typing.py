"""`nki.typing` (nt): annotations for kernel parameters. They document; trnsim does not enforce them.

`nt.tensor[128, 512]` declares an expected shape (NKI 0.3.0 migration guide); nki-library marks the
outputs a kernel writes in place as `nt.mutable_tensor` (its router_topk API reference).
"""

from __future__ import annotations


class _Annotation:
    def __getitem__(self, item):
        return self

    def __call__(self, *args, **kwargs):
        return self


tensor = _Annotation()
mutable_tensor = _Annotation()
scalar = _Annotation()
