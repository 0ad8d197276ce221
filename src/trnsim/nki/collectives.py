"""`nki.collectives`: importable so kernels that mention it load; every call raises
UnsupportedError (trnsim.collectives models collectives at the job level, not inside kernels)."""

from __future__ import annotations

from trnsim.errors import UnsupportedError

NAMES = ("all_reduce", "all_gather", "all_gather_v", "reduce_scatter", "all_to_all", "all_to_all_v",
         "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
         "collective_permute_implicit_current_processing_rank_id", "rank_id", "ReplicaGroup")


def _unsupported(name: str):
    def raise_unsupported(*args, **kwargs):
        raise UnsupportedError(f"nki.collectives.{name} is not emulated inside kernels",
                               what=f"nki.collectives.{name}", hint="see docs/nki.md")
    raise_unsupported.__name__ = name
    return raise_unsupported


all_reduce = _unsupported("all_reduce")
all_gather = _unsupported("all_gather")
all_gather_v = _unsupported("all_gather_v")
reduce_scatter = _unsupported("reduce_scatter")
all_to_all = _unsupported("all_to_all")
all_to_all_v = _unsupported("all_to_all_v")
collective_permute = _unsupported("collective_permute")
collective_permute_implicit = _unsupported("collective_permute_implicit")
collective_permute_implicit_reduce = _unsupported("collective_permute_implicit_reduce")
collective_permute_implicit_current_processing_rank_id = _unsupported(
    "collective_permute_implicit_current_processing_rank_id")
rank_id = _unsupported("rank_id")
ReplicaGroup = _unsupported("ReplicaGroup")
