"""The ranks of one emulated machine and how they meet: `ThreadWorld` runs every rank as a thread of
this process; `GlooWorld` is one rank of a torch.distributed (gloo) process group, so ranks can be
processes under torchrun, on one machine or several. Both offer one primitive, `gather`: every rank
hands in a payload and gets back everyone's, in rank order. Collectives compute their results from
that on each rank with the same code, so both give the same bits.
"""

from __future__ import annotations

import threading

from trnsim.errors import KernelError


class ThreadWorld:
    """`size` ranks as threads: a reusable rendezvous that carries one payload per rank."""

    def __init__(self, size: int):
        self.size = size
        self._condition = threading.Condition()
        self._calls = [0] * size  # collectives each rank has entered, in program order
        self._slots: dict[int, dict[int, object]] = {}
        self._collected: dict[int, int] = {}
        self._failed: str | None = None
        self._finished: set[int] = set()

    def gather(self, rank: int, payload: object) -> list:
        """Everyone's payload of this rank's next collective, in rank order."""
        with self._condition:
            call = self._calls[rank]
            self._calls[rank] += 1
            slots = self._slots.setdefault(call, {})
            slots[rank] = payload
            self._condition.notify_all()
            # Every rank that has not arrived is still running: it arrives, finishes its kernel or
            # fails (`launch` tells the world of each), however long its work before this takes.
            self._condition.wait_for(
                lambda: len(slots) == self.size or self._failed or self._finished - set(slots))
            if len(slots) < self.size and self._finished - set(slots):
                raise KernelError(f"rank {rank} waits at collective #{call}, but ranks "
                                  f"{sorted(self._finished - set(slots))} finished the kernel without it",
                                  hint="every rank must issue the same collectives in the same order")
            if len(slots) < self.size and self._failed:  # a collective every rank reached still completes
                error = KernelError(f"rank {rank}: another rank stopped ({self._failed}) before collective "
                                    f"#{call} completed")
                error.after_peer_error = True  # the launch reports that rank's own error instead
                raise error
            payloads = [slots[r] for r in range(self.size)]
            self._collected[call] = self._collected.get(call, 0) + 1
            if self._collected[call] == self.size:
                del self._slots[call], self._collected[call]
            return payloads

    def abandon(self, reason: str) -> None:
        """A rank stopped with an error: release the others from any collective."""
        with self._condition:
            self._failed = reason
            self._condition.notify_all()

    def finish(self, rank: int) -> None:
        """`rank` ran its kernel to the end: a collective still waiting for it never completes."""
        with self._condition:
            self._finished.add(rank)
            self._condition.notify_all()


class GlooWorld:
    """This process's rank of torch.distributed's default (gloo) process group."""

    def __init__(self):
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo")
        self._dist = dist
        self.size = dist.get_world_size()
        self.rank = dist.get_rank()

    def gather(self, rank: int, payload: object) -> list:
        payloads: list = [None] * self.size
        self._dist.all_gather_object(payloads, payload)
        return payloads

    def abandon(self, reason: str) -> None:
        """Other processes learn of a failure when gloo's collective times out or the job ends."""
