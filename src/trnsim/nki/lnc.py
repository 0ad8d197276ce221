"""LNC=2: the two cores of a logical NeuronCore run as two threads that meet at
`nisa.sendrecv` (a tile goes to the peer's memory) and `nisa.core_barrier`.

A send is queued and a receive waits, so calls that can never meet (one core finishes, or both
wait for each other) are refused at once, and identically in trace-only runs, whose cores do not
wait: there each core's calls are recorded and met afterwards by the same rules (`check_calls`)."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from trnsim.core.execute import mark_written, to_storage
from trnsim.core.isa import Opcode
from trnsim.errors import KernelError, SourceLoc
from trnsim.nki import backend

_WAIT_S = 60.0  # a peer that never answers is a kernel bug (mismatched control flow), not a hang
_ABANDONED = "abandoned"  # mailbox key set when a core of the launch has stopped with an error
_FINISHED = "finished"  # (_FINISHED, core): that core returned from the kernel
_BARRIERS = "barriers"  # (_BARRIERS, core): how many barriers that core has reached
_WAITING = "waiting"  # (_WAITING, core): what that core is waiting for (a function true when it may go)
_DEADLOCK = "deadlock"  # set when both cores wait for each other
_CALLS = "calls"  # (_CALLS, core): that core's sendrecv / core_barrier calls, for `check_calls`


def _condition(launch) -> threading.Condition:
    with launch.lock:
        if "condition" not in launch.mailboxes:
            launch.mailboxes["condition"] = threading.Condition()
        return launch.mailboxes["condition"]


def exchange(src, dst, send_to: int, recv_from: int, pipe: int) -> None:
    """Send `src` to core `send_to` and receive the tile core `recv_from` sends into `dst`."""
    running = backend.core()
    launch = running.launch
    me = running.program_id
    cores = launch.cores
    for what, rank in (("send_to_rank", send_to), ("recv_from_rank", recv_from)):
        if not 0 <= rank < cores:
            raise KernelError(f"{what}={rank}: this launch has {cores} core{'s' if cores > 1 else ''} "
                              f"(ranks 0..{cores - 1})", op="nisa.sendrecv",
                              hint="sendrecv runs between the two cores of an LNC=2 launch (kernel[2])")
    ins_params = {"send_to_rank": send_to, "recv_from_rank": recv_from, "pipe_id": pipe}
    running.issue(Opcode.SENDRECV, (dst,), (src,), ins_params, execute=False)
    _record(launch, me, ("sendrecv", send_to, recv_from, pipe))
    if not running.with_values:
        return
    condition = _condition(launch)
    # One queue per (receiver, sender, pipe): a core that runs ahead queues its next tile behind the
    # one its peer has not collected yet, so tiles arrive in the order they were sent. A tile
    # travels in its own dtype (a DMA moves bits).
    with condition:
        launch.mailboxes.setdefault((send_to, me, pipe), deque()).append(np.array(src.array()))
        condition.notify_all()
        mailbox = (me, recv_from, pipe)
        why = _wait(launch, condition, me, recv_from, lambda: bool(launch.mailboxes.get(mailbox)))
        if why is not None:
            raise _unmet("sendrecv", me, why)
        values = launch.mailboxes[mailbox].popleft()
    if values.dtype != dst.element.numpy:  # into another dtype: converted as a DMA converts
        values = to_storage(values.astype(np.float32), dst.element)
    dst.array()[...] = values.reshape(dst.shape)
    mark_written(dst)


def _record(launch, me: int, call: tuple) -> None:
    """Note a sendrecv / core_barrier call of core `me`, where the kernel made it."""
    launch.mailboxes.setdefault((_CALLS, me), []).append((*call, SourceLoc.of_caller()))


def _wait(launch, condition, me: int, peer: int, ready) -> str | None:
    """Wait (holding `condition`) until `ready()`; else why core `peer` will never make it true.

    Only the two cores change the mailboxes, under `condition`: when both wait and neither may go
    on, nothing ever will (a deadlock), and both are told at once."""
    mailboxes = launch.mailboxes
    peer_waits = mailboxes.get((_WAITING, peer))
    if not ready() and peer_waits is not None and not peer_waits():
        mailboxes[_DEADLOCK] = True
        condition.notify_all()
    mailboxes[(_WAITING, me)] = ready
    try:
        condition.wait_for(lambda: ready() or mailboxes.get(_ABANDONED) or mailboxes.get(_DEADLOCK)
                           or mailboxes.get((_FINISHED, peer)), _WAIT_S)
    finally:
        del mailboxes[(_WAITING, me)]
    if ready():
        return None
    if mailboxes.get((_FINISHED, peer)):
        return f"core {peer} finished its kernel without a matching call"
    if mailboxes.get(_DEADLOCK):
        return DEADLOCK
    if mailboxes.get(_ABANDONED):  # the launch reports the peer's own error, which came first
        return PEER_FAILED
    return f"core {peer} did not answer in {_WAIT_S:.0f} s"


DEADLOCK = "each core waits for the other at a different sendrecv or core_barrier (they never meet)"
PEER_FAILED = "the other core stopped with an error"


def _unmet(kind: str, me: int, why: str, where: SourceLoc | None = None) -> KernelError:
    """The error of a call that can never complete; one caused by the peer's own error says so
    (`after_peer_error`), so that the launch reports the peer's error instead."""
    op = "nisa.sendrecv" if kind == "sendrecv" else "nisa.core_barrier"
    error = KernelError(f"{kind} on core {me}: {why}", op=op, where=where,
                        hint=f"both cores must make the same {kind} calls, in an order in which they meet")
    error.after_peer_error = why == PEER_FAILED
    return error


def check_calls(launch) -> None:
    """Meet the two cores' recorded calls as a run with values meets them (sends queued, receives
    and barriers waiting) and raise the error that run raises for calls that never complete: the
    lowest core's, at its call. Trace-only LNC=2 launches, whose cores never wait, end with it."""
    calls = [launch.mailboxes.get((_CALLS, core), []) for core in (0, 1)]
    at, sent, queued, reached = [0, 0], [False, False], {}, [0, 0]
    moved = True
    while moved:
        moved = False
        for me, peer in ((0, 1), (1, 0)):
            if at[me] == len(calls[me]):
                continue
            kind, *parts = calls[me][at[me]]
            if kind == "sendrecv":
                send_to, recv_from, pipe = parts[:3]
                if not sent[me]:
                    queued[(send_to, me, pipe)] = queued.get((send_to, me, pipe), 0) + 1
                    sent[me] = True
                ready = queued.get((me, recv_from, pipe), 0) > 0
                if ready:
                    queued[(me, recv_from, pipe)] -= 1
            else:
                if not sent[me]:
                    reached[me], sent[me] = reached[me] + 1, True
                ready = reached[peer] >= reached[me]
            if ready:
                at[me], sent[me], moved = at[me] + 1, False, True
    for me, peer in ((0, 1), (1, 0)):
        if at[me] < len(calls[me]):
            kind, where = calls[me][at[me]][0], calls[me][at[me]][-1]
            finished = at[peer] == len(calls[peer])
            why = f"core {peer} finished its kernel without a matching call" if finished else DEADLOCK
            raise _unmet(kind, me, why, where)


def finish(launch, core: int) -> None:
    """Core `core` returned from the kernel: a peer waiting for it (or waiting at a barrier it will
    never reach) is told at once instead of after _WAIT_S."""
    condition = _condition(launch)
    with condition:
        launch.mailboxes[(_FINISHED, core)] = True
        condition.notify_all()


def abandon(launch) -> None:
    """A core of the launch stopped with an error: release its peer from any barrier or sendrecv."""
    condition = _condition(launch)
    with condition:
        launch.mailboxes[_ABANDONED] = True
        condition.notify_all()


def barrier() -> None:
    """Wait until the other core has reached as many barriers as this one."""
    running = backend.core()
    running.issue(Opcode.CORE_BARRIER, (), (), {}, execute=False)
    launch, me = running.launch, running.program_id
    if launch.cores < 2:
        return
    _record(launch, me, ("core_barrier",))
    if not running.with_values:
        return
    peer = 1 - me
    condition = _condition(launch)
    with condition:
        reached = launch.mailboxes[(_BARRIERS, me)] = launch.mailboxes.get((_BARRIERS, me), 0) + 1
        condition.notify_all()
        why = _wait(launch, condition, me, peer,
                    lambda: launch.mailboxes.get((_BARRIERS, peer), 0) >= reached)
        if why is not None:
            raise _unmet("core_barrier", me, why)
