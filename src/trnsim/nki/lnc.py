"""LNC=2: the two cores of a logical NeuronCore run as two threads that meet at
`nisa.sendrecv` (a tile goes to the peer's memory) and `nisa.core_barrier`."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from trnsim.core.execute import mark_written, to_storage
from trnsim.core.isa import Opcode
from trnsim.errors import KernelError
from trnsim.nki import backend

_WAIT_S = 60.0  # a peer that never answers is a kernel bug (mismatched control flow), not a hang
_ABANDONED = "abandoned"  # mailbox key set when a core of the launch has stopped with an error
_FINISHED = "finished"  # (_FINISHED, core): that core returned from the kernel
_BARRIERS = "barriers"  # (_BARRIERS, core): how many barriers that core has reached


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
    if not running.with_values:
        return
    condition = _condition(launch)
    # One queue per (receiver, sender, pipe): a core that runs ahead queues its next tile behind the
    # one its peer has not collected yet, so tiles arrive in the order they were sent. A tile
    # travels in its own dtype (a DMA moves bits).
    with condition:
        launch.mailboxes.setdefault((send_to, me, pipe), deque()).append(np.array(src.array()))
        condition.notify_all()
        arrived = condition.wait_for(lambda: launch.mailboxes.get((me, recv_from, pipe))
                                     or launch.mailboxes.get(_ABANDONED)
                                     or launch.mailboxes.get((_FINISHED, recv_from)), _WAIT_S)
        if not launch.mailboxes.get((me, recv_from, pipe)):
            raise KernelError(f"sendrecv on core {me}: {_peer_state(launch, recv_from, arrived)}",
                              hint="both cores must run the same sendrecv calls")
        values = launch.mailboxes[(me, recv_from, pipe)].popleft()
    if values.dtype != dst.element.numpy:  # into another dtype: converted as a DMA converts
        values = to_storage(values.astype(np.float32), dst.element)
    dst.array()[...] = values.reshape(dst.shape)
    mark_written(dst)


def _peer_state(launch, peer: int, arrived: bool) -> str:
    """Why core `peer` will never answer."""
    if launch.mailboxes.get((_FINISHED, peer)):
        return f"core {peer} finished its kernel without a matching call"
    if arrived:  # the launch reports the peer's own error, which came first
        return f"core {peer} stopped with an error"
    return f"core {peer} did not answer in {_WAIT_S:.0f} s"


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
    if launch.cores < 2 or not running.with_values:
        return
    peer = 1 - me
    condition = _condition(launch)
    with condition:
        reached = launch.mailboxes[(_BARRIERS, me)] = launch.mailboxes.get((_BARRIERS, me), 0) + 1
        condition.notify_all()
        arrived = condition.wait_for(lambda: launch.mailboxes.get((_BARRIERS, peer), 0) >= reached
                                     or launch.mailboxes.get(_ABANDONED)
                                     or launch.mailboxes.get((_FINISHED, peer)), _WAIT_S)
        if launch.mailboxes.get((_BARRIERS, peer), 0) < reached:
            raise KernelError(f"core_barrier on core {me}: {_peer_state(launch, peer, arrived)}",
                              op="nisa.core_barrier", hint="both cores must reach the same barriers")
