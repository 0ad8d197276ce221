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
    ins_params = {"send_to_rank": send_to, "recv_from_rank": recv_from, "pipe_id": pipe}
    running.issue(Opcode.SENDRECV, (dst,), (src,), ins_params, execute=False)
    if not running.with_values:
        return
    condition = _condition(launch)
    # One queue per (receiver, sender, pipe): a core that runs ahead queues its next tile behind the
    # one its peer has not collected yet, so tiles arrive in the order they were sent.
    with condition:
        launch.mailboxes.setdefault((send_to, me, pipe), deque()).append(np.array(src.array(), np.float32))
        condition.notify_all()
        arrived = condition.wait_for(lambda: launch.mailboxes.get((me, recv_from, pipe))
                                     or launch.mailboxes.get(_ABANDONED), _WAIT_S)
        if not launch.mailboxes.get((me, recv_from, pipe)):
            if arrived:  # the launch reports the peer's own error, which came first
                raise KernelError(f"sendrecv on core {me}: core {recv_from} stopped with an error")
            raise KernelError(f"sendrecv on core {me} waited for core {recv_from} (pipe {pipe}), which never "
                              f"sent", hint="both cores must run the same sendrecv calls")
        values = launch.mailboxes[(me, recv_from, pipe)].popleft()
    dst.array()[...] = to_storage(values, dst.element).reshape(dst.shape)
    mark_written(dst)


def abandon(launch) -> None:
    """A core of the launch stopped with an error: release its peer from any barrier or sendrecv."""
    if launch.barrier is not None:
        launch.barrier.abort()
    condition = _condition(launch)
    with condition:
        launch.mailboxes[_ABANDONED] = True
        condition.notify_all()


def barrier() -> None:
    running = backend.core()
    running.issue(Opcode.CORE_BARRIER, (), (), {}, execute=False)
    if running.launch.barrier is not None and running.with_values:
        running.launch.barrier.wait(_WAIT_S)
