"""`nki.typing`: `nt.tensor[shape]` style annotations. They document; trnsim does not enforce them."""

from __future__ import annotations


class _Annotation:
    def __getitem__(self, item):
        return self

    def __call__(self, *args, **kwargs):
        return self


tensor = _Annotation()
scalar = _Annotation()
