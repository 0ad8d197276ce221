"""One timeline for a multi-rank launch: each rank's trace scheduled on its own cores, with the
cross-rank dependency collectives add: the k-th collective of a group starts on every member only
once all of them have reached it. Each collective runs on its core's collective stream ("dma_cc").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trnsim.core.isa import Opcode
from trnsim.core.trace import Trace
from trnsim.timing.perfetto import write_chrome_trace
from trnsim.timing.schedule import Timeline, schedule


@dataclass(frozen=True)
class RankTimeline:
    """The ranks' timelines, aligned at their collectives; `waits_s[r]` is how much later rank r
    finishes than it would alone, waiting for slower ranks."""

    timelines: tuple[Timeline, ...]
    waits_s: tuple[float, ...]

    @property
    def latency_s(self) -> float:
        return max((timeline.latency_s for timeline in self.timelines), default=0.0)

    def write(self, path: str | Path) -> Path:
        """A Chrome/Perfetto trace with one process per rank (open it at ui.perfetto.dev)."""
        return write_chrome_trace({f"rank {r}": t for r, t in enumerate(self.timelines)}, path)


def rank_timeline(traces: Sequence[Trace], target: str | None = None) -> RankTimeline:
    """Schedule every rank's trace, then hold each collective until its whole group has reached it,
    re-scheduling until no start moves (each pass can only delay, so it ends). A permute waits for
    nobody here: its sender is not recorded in the trace."""
    collectives = [[i for i, ins in enumerate(trace) if ins.opcode is Opcode.COLLECTIVE]
                   for trace in traces]
    holds: list[dict[int, float]] = [{} for _ in traces]
    alone = [schedule(trace, target).latency_s for trace in traces]
    while True:
        timelines = [schedule(trace, target, not_before=hold)
                     for trace, hold in zip(traces, holds, strict=True)]
        moved = False
        for step, members in _meetings(traces, collectives):
            start = max(float(timelines[r].start_s[collectives[r][step]]) for r in members)
            for rank in members:
                index = collectives[rank][step]
                if float(timelines[rank].start_s[index]) < start:
                    holds[rank][index], moved = start, True
        if not moved:
            break
    waits = tuple(timeline.latency_s - own for timeline, own in zip(timelines, alone, strict=True))
    return RankTimeline(tuple(timelines), waits)


def _meetings(traces, collectives):
    """(k, ranks of the group) for each rank's k-th collective: the ranks that meet there."""
    for rank, indices in enumerate(collectives):
        for step, index in enumerate(indices):
            group = traces[rank][index].param("group")
            members = [r for r in group if r < len(traces) and step < len(collectives[r])]
            yield step, members

