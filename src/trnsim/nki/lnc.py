"""LNC=2: the two cores of a logical NeuronCore run as two threads that meet at
`nisa.sendrecv` (a tile goes to the peer's memory) and `nisa.core_barrier`.

A send is queued and a receive waits, so calls that can never meet (one core finishes, or both
wait for each other) are refused at once, and identically in trace-only runs, whose cores do not
wait: there each core's calls are recorded and met afterwards by the same rules (`check_calls`)."""

from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np

from trnsim.core.execute import mark_written
from trnsim.core.isa import Opcode
from trnsim.errors import ArgumentError, KernelError, SourceLoc
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
    backend.check_own_tiles(running, (src, dst), "nisa.sendrecv")
    ins_params = {"send_to_rank": send_to, "recv_from_rank": recv_from, "pipe_id": pipe}
    running.issue(Opcode.SENDRECV, (dst,), (src,), ins_params, execute=False)
    cores = launch.cores
    for what, rank in (("send_to_rank", send_to), ("recv_from_rank", recv_from)):
        if not 0 <= rank < cores:
            raise KernelError(f"{what}={rank}: this launch has {cores} core{'s' if cores > 1 else ''} "
                              f"(ranks 0..{cores - 1})", op="nisa.sendrecv",
                              hint="sendrecv runs between the two cores of an LNC=2 launch (kernel[2])")
    if pipe < 0:  # the NKI docs give pipe_id no range; a negative one names no pipe
        raise ArgumentError(f"pipe_id={pipe}; it must be 0 or more", op="nisa.sendrecv")
    _record(launch, me, ("sendrecv", send_to, recv_from, pipe, _layout(src), _layout(dst)))
    if not running.with_values:
        return
    condition = _condition(launch)
    # One queue per (receiver, sender, pipe): a core that runs ahead queues its next tile behind the
    # one its peer has not collected yet, so tiles arrive in the order they were sent. A tile
    # travels in its own dtype (a DMA moves bits), with its layout for `_mismatch`.
    with condition:
        outbox = launch.mailboxes.setdefault((send_to, me, pipe), deque())
        outbox.append((_layout(src), np.array(src.array())))
        condition.notify_all()
        mailbox = (me, recv_from, pipe)
        why = _wait(launch, condition, me, recv_from, lambda: bool(launch.mailboxes.get(mailbox)))
        if why is not None:
            raise _unmet("sendrecv", me, why)
        sent, values = launch.mailboxes[mailbox].popleft()
    mismatch = _mismatch(me, recv_from, sent, _layout(dst))
    if mismatch is not None:
        raise mismatch
    dst.array()[...] = values.reshape(dst.shape)
    mark_written(dst)


def _layout(tile) -> tuple:
    return tuple(tile.shape), str(tile.dtype)


def _mismatch(me: int, sender: int, sent: tuple, dst: tuple,
              where: SourceLoc | None = None) -> KernelError | None:
    """The error for a tile of another size or dtype than the dst it lands in (None if it fits):
    a DMA into the peer's memory moves the sender's bytes, which must fill dst exactly."""
    (sent_shape, sent_dtype), (shape, dtype) = sent, dst
    if math.prod(sent_shape) == math.prod(shape) and sent_dtype == dtype:
        return None
    return KernelError(f"sendrecv on core {me}: core {sender} sends {sent_dtype}{list(sent_shape)} into this "
                       f"core's dst of {dtype}{list(shape)}", op="nisa.sendrecv", where=where,
                       hint="both cores must exchange tiles of the same size and dtype")


def _record(launch, me: int, call: tuple) -> None:
    """Note a sendrecv / core_barrier call of core `me`, where the kernel made it."""
    launch.mailboxes.setdefault((_CALLS, me), []).append((*call, SourceLoc.of_caller()))


def _wait(launch, condition, me: int, peer: int, ready) -> str | None:
    """Wait (holding `condition`) until `ready()`; else why core `peer` will never make it true.

    Only the two cores change the mailboxes, under `condition`: when both wait and neither may go
    on, nothing ever will (a deadlock), and both are told at once."""
    mailboxes = launch.mailboxes
    if peer == me and not ready():  # only this core could send it, and it is waiting
        return NOTHING_FROM_SELF
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
NOTHING_FROM_SELF = (
    "it receives from itself (recv_from_rank is its own rank), and it sent itself no tile on that pipe")


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
    and barriers waiting) and raise the error that run raises: the lowest core's tile that does not
    fit its dst, else the lowest core's call that never completes, at its call. Trace-only LNC=2
    launches, whose cores never wait, end with it."""
    calls = [launch.mailboxes.get((_CALLS, core), []) for core in (0, 1)]
    at, sent, queued, reached, misfits = [0, 0], [False, False], {}, [0, 0], [None, None]
    moved = True
    while moved:
        moved = False
        for me, peer in ((0, 1), (1, 0)):
            if at[me] == len(calls[me]) or misfits[me]:
                continue
            kind, *parts, where = calls[me][at[me]]
            if kind == "sendrecv":
                send_to, recv_from, pipe, src, dst = parts
                if not sent[me]:
                    queued.setdefault((send_to, me, pipe), deque()).append(src)
                    sent[me] = True
                inbox = queued.get((me, recv_from, pipe))
                ready = bool(inbox)
                if ready:
                    misfits[me] = _mismatch(me, recv_from, inbox.popleft(), dst, where)
            else:
                if not sent[me]:
                    reached[me], sent[me] = reached[me] + 1, True
                ready = reached[peer] >= reached[me]
            if ready:  # a core whose tile does not fit its dst stops there, as it raises there
                moved = True
                if not misfits[me]:
                    at[me], sent[me] = at[me] + 1, False
    for misfit in misfits:
        if misfit is not None:
            raise misfit
    for me, peer in ((0, 1), (1, 0)):
        if at[me] < len(calls[me]):
            kind, *parts, where = calls[me][at[me]]
            if kind == "sendrecv" and parts[1] == me:
                why = NOTHING_FROM_SELF
            elif at[peer] == len(calls[peer]):
                why = f"core {peer} finished its kernel without a matching call"
            else:
                why = DEADLOCK
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
