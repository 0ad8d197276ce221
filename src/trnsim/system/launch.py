"""Launching one kernel on many ranks: `launch` runs N ranks as threads of this process;
`launch_distributed` runs this process's rank of a torchrun job (gloo). In both, each rank runs
the kernel with its own arguments and `nki.collectives` calls meet the other ranks' (world.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from trnsim import hardware
from trnsim.errors import ConfigError, reported_error
from trnsim.nki import collectives
from trnsim.nki.jit import Kernel, jit, simulate
from trnsim.system.topology import Machine
from trnsim.system.world import GlooWorld, ThreadWorld

SYSTEM_OF_TARGET = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "Trn3 Gen1 UltraServer"}
"""The system a generation's ranks live on when no instance is named."""


class LaunchResults(list):
    """Each rank's result, in rank order, with each rank's trace (`traces`) and their joint timeline."""

    def __init__(self, results: list, traces: list, target: str, machine: Machine | None = None):
        super().__init__(results)
        self.traces = traces
        self.target = target
        self.machine = machine

    def timeline(self, target: str | None = None):
        """The ranks' timelines aligned at their collectives (system.timeline.RankTimeline); the
        collectives are timed on the launch's machine (its instance and LNC) when `target` is the
        launch's own generation."""
        from trnsim.system.collectives import timed_on
        from trnsim.system.timeline import rank_timeline

        if self.machine is None or (target or self.target) != self.target:
            return rank_timeline(self.traces, target or self.target)
        with timed_on(self.machine):
            return rank_timeline(self.traces, self.target)


def launch(kernel, ranks: int, args: Sequence | Callable[[int], tuple], *, target: str = "trn2",
           instance: str | None = None, **kwargs) -> LaunchResults:
    """Run `kernel` on `ranks` ranks (threads), rank r with `args[r]` (a tuple of arguments, or one
    array) or `args(r)`; returns each rank's result, in rank order (with `.traces` and
    `.timeline()`). The first rank to fail stops the others; the error raised is the lowest failing
    rank's own (not one caused by another rank stopping), so it is the same in every run."""
    machine, target = _machine(target, instance, ranks)
    arguments = _arguments(args, ranks)
    kernel = jit(kernel)
    world = ThreadWorld(ranks)
    results: list = [None] * ranks
    traces: list = [None] * ranks
    failures: dict[int, BaseException] = {}

    def run(rank: int) -> None:
        token = collectives.bind(collectives.RankBinding(world, rank, machine))
        own = Kernel(kernel.fn, kernel.grid, kernel.options)  # so each rank keeps its own trace
        try:
            results[rank] = simulate(own, target=target)(*arguments[rank], **kwargs)
            traces[rank] = own.last_trace
            world.finish(rank)
        except BaseException as error:  # re-raised in the caller's thread below
            failures[rank] = error
            world.abandon(f"rank {rank}: {type(error).__name__}")
        finally:
            collectives.unbind(token)

    threads = [threading.Thread(target=run, args=(rank,), name=f"trnsim-rank-{rank}")
               for rank in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise reported_error(failures)
    return LaunchResults(results, traces, target, machine)


def launch_distributed(kernel, *args, target: str = "trn2", instance: str | None = None, **kwargs):
    """This process's rank of a `torchrun` job: joins torch.distributed's gloo group (initialising it
    from torchrun's environment if needed), runs `kernel(*args)` as that rank, and returns its result."""
    world = GlooWorld()
    machine, target = _machine(target, instance, world.size)
    token = collectives.bind(collectives.RankBinding(world, world.rank, machine))
    try:
        return simulate(kernel, target=target)(*args, **kwargs)
    finally:
        collectives.unbind(token)


def _machine(target: str, instance: str | None, ranks: int) -> tuple[Machine, str]:
    if target not in SYSTEM_OF_TARGET:
        raise ConfigError(f"unknown target {target!r} for a multi-rank launch",
                          hint=f"one of {', '.join(SYSTEM_OF_TARGET)}")
    machine = Machine.of(instance or SYSTEM_OF_TARGET[target], ranks=ranks)
    chip_core = machine.fabric.system.chip.core
    if hardware.core(target) is not chip_core:
        raise ConfigError(f"target {target} does not match {machine.fabric.name}, whose cores are "
                          f"{chip_core.name}")
    return machine, target


def _arguments(args, ranks: int) -> list[tuple]:
    if callable(args):
        found = [args(rank) for rank in range(ranks)]
    elif isinstance(args, Sequence) and not isinstance(args, str) and len(args) == ranks:
        found = list(args)
    else:
        raise ConfigError(f"args must give one entry per rank ({ranks}), or be a function of the rank")
    return [entry if isinstance(entry, tuple) else (entry,) for entry in found]
