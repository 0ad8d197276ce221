"""`nki.collectives`: collectives between the ranks of a multi-rank launch (`trnsim.system.launch`,
or `trnsim.system.launch_distributed` under torchrun), with NKI's documented signatures and rules.

Each call checks its arguments as NKI documents them (HBM or SBUF but not both, coalesced lists only
in HBM, the collective_dim limits, no kernel input or output as a collective operand), hands this
rank's source values to the launch's world, and issues one COLLECTIVE instruction whose EXECUTE rule
builds the result from every rank's values (core/execute_data.py). Outside a multi-rank launch a call
raises UnsupportedError saying how to launch one.
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass

import numpy as np

from trnsim.core.execute_data import fold
from trnsim.core.isa import Memory, Opcode
from trnsim.errors import ArgumentError, KernelError, ShapeError, UnsupportedError
from trnsim.nki import backend, calls
from trnsim.nki.isa import op_name
from trnsim.nki.registers import VirtualRegister
from trnsim.nki.tensor import NkiTensor

NAMES = ("all_reduce", "all_gather", "all_gather_v", "reduce_scatter", "all_to_all", "all_to_all_v",
         "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
         "collective_permute_implicit_current_processing_rank_id", "rank_id", "ReplicaGroup")

REDUCE_OPS = ("add", "minimum", "maximum")
"""The reductions NKI's all_reduce and reduce_scatter take (nl.add, nl.minimum, nl.maximum)."""


@dataclass(frozen=True)
class RankBinding:
    """The rank a kernel runs as: its world (what `gather` meets), number, and machine."""

    world: object
    rank: int
    machine: object


_BINDING: contextvars.ContextVar[RankBinding | None] = contextvars.ContextVar("trnsim_rank", default=None)


def bind(binding: RankBinding) -> contextvars.Token:
    """Run the kernels of this thread as `binding.rank` (system.launch does this per rank)."""
    return _BINDING.set(binding)


def unbind(token: contextvars.Token) -> None:
    _BINDING.reset(token)


def bound() -> RankBinding | None:
    """The rank this thread's kernels run as, or None outside a multi-rank launch."""
    return _BINDING.get()


def _binding(call: str) -> RankBinding:
    grid = backend.core().grid if backend.in_kernel() else ()
    if math.prod(grid) > 1:
        raise UnsupportedError(f"nki.collectives.{call} inside a launch grid {list(grid)} is not emulated",
                               what=f"nki.collectives.{call} in a grid",
                               hint="launch the kernel without a grid, one program per rank")
    binding = _BINDING.get()
    if binding is None:
        raise UnsupportedError(f"nki.collectives.{call} needs ranks to talk to; this kernel runs on one",
                               what=f"nki.collectives.{call}",
                               hint="launch it on N ranks: trnsim.system.launch(kernel, ranks=N, args=...)")
    return binding


class ReplicaGroup:
    """Lists of ranks that take part in a collective together; no rank may be in two lists."""

    def __init__(self, groups=None):
        if not (isinstance(groups, list | tuple) and groups and all(
                isinstance(g, list | tuple) and g and all(_is_rank(r) for r in g) for g in groups)):
            raise ArgumentError(f"ReplicaGroup takes a non-empty list of non-empty rank lists, got "
                                f"{groups!r}", op="nki.collectives.ReplicaGroup")
        ranks = [int(r) for g in groups for r in g]
        if len(set(ranks)) != len(ranks):
            raise ArgumentError(f"ReplicaGroup {groups!r}: the rank lists overlap",
                                op="nki.collectives.ReplicaGroup", hint="each rank belongs to one list")
        self.groups = tuple(tuple(int(r) for r in g) for g in groups)

    def group_of(self, rank: int, call: str, ranks: int | None = None) -> tuple[int, ...]:
        """The list holding `rank`; every rank it names must exist among the launch's `ranks`."""
        for group in self.groups:
            if rank in group:
                if ranks is not None and max(group) >= ranks:
                    raise ArgumentError(f"the replica group {list(map(list, self.groups))} names rank "
                                        f"{max(group)}, but the launch has {ranks} ranks",
                                        op=f"nki.collectives.{call}")
                return group
        raise ArgumentError(f"rank {rank} is in no list of the replica group {list(map(list, self.groups))}",
                            op=f"nki.collectives.{call}")

    def __repr__(self) -> str:
        return f"ReplicaGroup({[list(g) for g in self.groups]})"


def _is_rank(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 0


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    _collective("all_reduce", srcs, dsts, replica_group, op=op, priority=priority, name=name)


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    _collective("all_gather", srcs, dsts, replica_group, dim=collective_dim, priority=priority, name=name)


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None) -> None:
    _collective("reduce_scatter", srcs, dsts, replica_group, op=op, dim=collective_dim, priority=priority,
                name=name)


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    _collective("all_to_all", srcs, dsts, replica_group, dim=collective_dim, priority=priority, name=name)


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    """Each (source, target) pair sends source's tensor to target; a rank no pair targets keeps dst."""
    binding = _binding("collective_permute")
    pairs = _pairs(source_target_pairs)
    for pair in pairs:
        if max(pair) >= binding.world.size:
            raise ArgumentError(f"source_target_pairs {source_target_pairs!r} name rank {max(pair)}, but "
                                f"the launch has {binding.world.size} ranks",
                                op="nki.collectives.collective_permute")
    senders = [source for source, target in pairs if target == binding.rank]
    targets = [target for source, target in pairs if source == binding.rank]
    _collective("collective_permute", srcs, dsts, None, priority=priority, name=name,
                sender=senders[0] if senders else None, target=targets[0] if targets else None)


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,),
                                priority=None, name=None) -> None:
    """Each rank sends to its successor in its ring (list of the replica group), per channel."""
    for srcs, dsts in _channels("collective_permute_implicit", srcs_by_channel, dsts_by_channel,
                                replica_group, channel_ids):
        _ring_step("collective_permute_implicit", srcs, dsts, replica_group, priority, name)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group,
                                       op, channel_ids=(0,), priority=None, name=None) -> None:
    """op(srcs0, srcs1) computed here (`fold`) goes to the successor; the predecessor's lands in dsts."""
    call = "collective_permute_implicit_reduce"
    _check_reduce_op(op, call)
    channels = _channels(call, srcs0_by_channel, dsts_by_channel, replica_group, channel_ids)
    if not isinstance(srcs1_by_channel, list | tuple) or len(srcs1_by_channel) != len(channels):
        raise ArgumentError("srcs1_by_channel must have one list per channel, like srcs0_by_channel",
                            op=f"nki.collectives.{call}")
    for (srcs0, dsts), srcs1 in zip(channels, srcs1_by_channel, strict=True):
        srcs0, srcs1, dsts = (_tensors(srcs0, "srcs0", call), _tensors(srcs1, "srcs1", call),
                              _tensors(dsts, "dsts", call))
        if [t.shape for t in srcs1] != [t.shape for t in srcs0]:
            raise ShapeError(f"srcs1 shapes {[list(t.shape) for t in srcs1]} differ from srcs0's "
                             f"{[list(t.shape) for t in srcs0]}; they are combined element by element",
                             op=f"nki.collectives.{call}",
                             hint="give srcs1 the shapes of srcs0")
        _ring_step(call, srcs0, dsts, replica_group, priority, name, reduce=(op_name(op), srcs1, dsts))


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0,
                                                           name=None) -> VirtualRegister:
    """A register with the rank whose data this rank holds after `iteration_id` ring steps: its own
    at 0, then its predecessor's, and so on round the ring."""
    call = "collective_permute_implicit_current_processing_rank_id"
    binding = _binding(call)
    if not _is_rank(iteration_id) or not _is_rank(channel_id):
        raise ArgumentError(f"iteration_id and channel_id are integers >= 0, got {iteration_id!r}, "
                            f"{channel_id!r}", op=f"nki.collectives.{call}")
    ring = _replica_group(replica_group, call).group_of(binding.rank, call, binding.world.size)
    return VirtualRegister(ring[(ring.index(binding.rank) - int(iteration_id)) % len(ring)])


def rank_id(name=None) -> VirtualRegister:
    """A register holding this rank's number."""
    return VirtualRegister(_binding("rank_id").rank)


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """Each rank's src[send_displ : send_displ + send_count] (metadata rows 0 and 1, first column) goes
    to every rank, landing in equal slots of dst; row 2 receives the counts unless recv_counts_known.
    Documented limits: LNC=2, 4 ranks of one chip per rank-list, no has_rdispls."""
    call = "all_gather_v"
    binding = _binding(call)
    if has_rdispls:
        raise UnsupportedError("all_gather_v(has_rdispls=True) is not supported (NKI's documented limit)",
                               what="nki.collectives.all_gather_v has_rdispls")
    group = _replica_group(replica_group, call).group_of(binding.rank, call, binding.world.size)
    chips = {(place.system, place.node, place.chip) for place in map(binding.machine.place, group)}
    if binding.machine.lnc != 2 or len(group) != 4 or len(chips) != 1:
        raise UnsupportedError("all_gather_v runs only under LNC=2 on rank-lists of the 4 ranks of one chip",
                               what="nki.collectives.all_gather_v replica group")
    _variable(call, srcs, dsts, group, metadata_tensor, recv_counts_known, has_rdispls, priority, name)


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """Rank r sends src[send_displs[j] : + send_counts[j]] to the j-th rank of its list (metadata rows
    0 and 1); chunks land at recv_displs (row 3, has_rdispls, NeuronSwitch only) or in equal slots;
    row 2 receives the counts unless recv_counts_known. Documented limits: on NeuronSwitch, LNC=2,
    several devices, whole devices per list; elsewhere inter-node lists (one rank per node)."""
    call = "all_to_all_v"
    binding = _binding(call)
    group = _replica_group(replica_group, call).group_of(binding.rank, call, binding.world.size)
    machine = binding.machine
    places = [machine.place(rank) for rank in group]
    if machine.fabric.layout == "switch":
        devices = {(p.system, p.node, p.chip) for p in places}
        whole = len(group) == len(devices) * machine.ranks_per_chip
        if machine.lnc != 2 or len(devices) < 2 or not whole:
            raise UnsupportedError("all_to_all_v on NeuronSwitch needs LNC=2 and rank-lists of whole devices "
                                   "(every rank of each), more than one", what="nki.collectives.all_to_all_v")
    else:
        nodes = {(p.system, p.node) for p in places}
        if len(nodes) != len(group) or len({(p.chip, p.core) for p in places}) != 1:
            raise UnsupportedError("all_to_all_v here supports inter-node rank-lists only (same-indexed "
                                   "ranks of different nodes)", what="nki.collectives.all_to_all_v")
        if has_rdispls:
            raise UnsupportedError("all_to_all_v(has_rdispls=True) is supported only on NeuronSwitch (trn3)",
                                   what="nki.collectives.all_to_all_v has_rdispls")
    _variable(call, srcs, dsts, group, metadata_tensor, recv_counts_known, has_rdispls, priority, name)


def _variable(call, srcs, dsts, group, metadata, recv_counts_known, has_rdispls, priority, name) -> None:
    """The shared path of the _v collectives: read this rank's metadata, send its chunks, issue."""
    binding = _binding(call)
    srcs, dsts = _tensors(srcs, "srcs", call), _tensors(dsts, "dsts", call)
    [meta] = _tensors(metadata, "metadata_tensor", call)
    if len(srcs) != 1 or len(dsts) != 1:
        raise ArgumentError(f"{call} takes exactly one src and one dst tensor", op=f"nki.collectives.{call}")
    _check_placement(call, call, srcs + dsts + [meta], None)
    rows = 4 if has_rdispls else 3
    if str(meta.dtype) != "uint32" or meta.size != rows * len(group):
        raise ArgumentError(f"metadata_tensor must be uint32 with {rows} rows of {len(group)} (one per "
                            f"rank), got {meta.dtype} {list(meta.shape)}", op=f"nki.collectives.{call}")
    running = backend.core()
    received = displs = None
    outputs = (dsts[0],) if recv_counts_known else (dsts[0], _row(meta, 2))
    if running.with_values:
        running.flush()
        table = np.asarray(meta.array()).reshape(rows, len(group)).astype(np.int64)
        source = np.asarray(srcs[0].array()).reshape(-1)
        me = group.index(binding.rank)
        if call == "all_gather_v":
            sent = _chunk(source, table[1, 0], table[0, 0], call)
        else:
            sent = tuple(_chunk(source, table[1, j], table[0, j], call) for j in range(len(group)))
        everyone = binding.world.gather(binding.rank, sent)
        received = tuple(everyone[r] if call == "all_gather_v" else everyone[r][me] for r in group)
        slot = dsts[0].size // len(group)
        displs = tuple(int(table[3, s]) if has_rdispls else s * slot for s in range(len(group)))
    params = {"collective": call, "group": group, "rank": binding.rank, "priority": priority,
              "received": received, "recv_displs": displs}
    running.issue(Opcode.COLLECTIVE, outputs, (srcs[0], meta), params, name=name or "")


def _chunk(flat: np.ndarray, displ: int, count: int, call: str) -> np.ndarray:
    if not 0 <= displ <= displ + count <= flat.size:
        raise ArgumentError(f"metadata asks for elements {displ}..{displ + count} of a src of {flat.size}",
                            op=f"nki.collectives.{call}")
    return flat[displ:displ + count].copy()


def _row(meta: NkiTensor, row: int) -> NkiTensor:
    """Row `row` of the metadata (HBM: (rows, ranks); SBUF: (1, rows, ranks))."""
    return meta[row:row + 1, :] if len(meta.shape) == 2 else meta[0:1, row, :]


def _collective(call: str, srcs, dsts, replica_group, *, op=None, dim=None, priority=None, name=None,
                sender: int | None = None, ring_from: int | None = None, target: int | None = None,
                reduce=None) -> None:
    """Check one collective call, exchange this rank's values, and issue its instruction."""
    binding = _binding(call)
    srcs, dsts = _tensors(srcs, "srcs", call), _tensors(dsts, "dsts", call)
    kind = "permute" if "permute" in call else call
    _check_placement(call, kind, srcs + dsts, dim)
    if kind in ("all_reduce", "reduce_scatter"):
        _check_reduce_op(op, call)
    if kind == "permute":
        group = (binding.rank,)
    else:
        group = _replica_group(replica_group, call).group_of(binding.rank, call, binding.world.size)
    running = backend.core()
    received = None
    source = sender if ring_from is None else ring_from  # the rank a permute receives from
    if running.with_values:
        running.flush()  # this rank's earlier instructions have written its sources
        sent = tuple(np.array(src.array()) for src in srcs)
        if reduce is not None:  # permute_implicit_reduce: op(srcs0, srcs1) is what travels
            op_, srcs1, dsts1 = reduce
            sent = tuple(fold(op_, [a, b.array()], d.element.numpy) for a, b, d in zip(sent, srcs1, dsts1,
                                                                                       strict=True))
        call_seen = (call, op_name(op), group, dim, _layouts(srcs), _layouts(dsts))
        everyone = binding.world.gather(binding.rank, (call_seen, sent))
        _check_same_call(call_seen, [everyone[r][0] for r in group], group, binding.rank)
        if kind == "permute" and source is not None:
            _check_permuted(call, everyone[source][0][4], call_seen[5], source, converts=reduce is not None)
        everyone = [payload for _seen, payload in everyone]
        received = ((everyone[source],) if source is not None else ()) if kind == "permute" \
            else tuple(everyone[r] for r in group)
    params = {"collective": kind, "op": op_name(op), "collective_dim": dim, "priority": priority,
              "group": group, "rank": binding.rank, "received": received,
              "peer": (source if source is not None else target) if kind == "permute" else None}
    running.issue(Opcode.COLLECTIVE, tuple(dsts), tuple(srcs), params, name=name or "")


def _layouts(tensors) -> tuple:
    return tuple((tuple(t.shape), str(t.dtype)) for t in tensors)


def _check_same_call(mine: tuple, theirs: list[tuple], group: tuple, rank: int) -> None:
    """Every rank of the group must be at the same collective, with the same op, group and operand
    shapes and dtypes: anything else has no defined result."""
    for other, seen in zip(group, theirs, strict=True):
        if seen != mine:
            what = "op, replica group, collective_dim, srcs and dsts as (shape, dtype)"
            raise KernelError(f"{mine[0]} on rank {rank}: rank {other} is at {seen[0]} with other operands "
                              f"({what}: this rank {mine[1:]}, rank {other} {seen[1:]})",
                              op=f"nki.collectives.{mine[0]}",
                              hint="every rank of a group must issue the same collectives, on tensors of "
                                   "the same shapes and dtypes, in the same order")


def _check_permuted(call: str, sent: tuple, dsts: tuple, source: int, converts: bool) -> None:
    """What rank `source` sends must fit this rank's dsts: as many elements, and (unless it sends fp32
    sums to be rounded, as permute_implicit_reduce does) the same dtype."""
    for (sent_shape, sent_dtype), (shape, dtype) in zip(sent, dsts, strict=True):
        if math.prod(sent_shape) != math.prod(shape) or (sent_dtype != dtype and not converts):
            raise KernelError(f"{call}: rank {source} sends {sent_dtype}{list(sent_shape)} into a dst of "
                              f"{dtype}{list(shape)}", op=f"nki.collectives.{call}",
                              hint="a permute moves bits: send a tensor of dst's shape and dtype")


def _ring_step(call, srcs, dsts, replica_group, priority, name, reduce=None) -> None:
    binding = _binding(call)
    ring = _replica_group(replica_group, call).group_of(binding.rank, call, binding.world.size)
    position = ring.index(binding.rank)
    _collective(call, srcs, dsts, None, priority=priority, name=name, ring_from=ring[position - 1],
                target=ring[(position + 1) % len(ring)], reduce=reduce)


def _tensors(values, argument: str, call: str) -> list[NkiTensor]:
    if isinstance(values, NkiTensor):
        values = [values]
    if not (isinstance(values, list | tuple) and values and all(isinstance(v, NkiTensor) for v in values)):
        raise ArgumentError(f"{argument} must be a non-empty list of tensors, got {calls.describe(values)}",
                            op=f"nki.collectives.{call}")
    return list(values)


def _replica_group(value, call: str) -> ReplicaGroup:
    if not isinstance(value, ReplicaGroup):
        raise ArgumentError(f"replica_group must be a ReplicaGroup, got {calls.describe(value)}",
                            op=f"nki.collectives.{call}")
    return value


def _check_reduce_op(op, call: str) -> None:
    if op_name(op) not in REDUCE_OPS:
        raise ArgumentError(f"op={op!r}; {call} reduces with nl.add, nl.minimum or nl.maximum",
                            op=f"nki.collectives.{call}")


def _check_placement(call: str, kind: str, tensors: list[NkiTensor], dim) -> None:
    """NKI's placement rules: one memory for all operands, SBUF only with one src and one dst and
    not for all_to_all or collective_permute (their docs say HBM; the ring permutes' docs set no
    memory, and nki-library's fine-grained all-gather permutes SBUF tiles), the collective_dim each
    allows, and no kernel input or output."""
    where = f"nki.collectives.{call}"
    memories = {t.storage.memory for t in tensors}
    if not memories <= {Memory.HBM, Memory.SBUF} or len(memories) > 1:
        raise ArgumentError(f"operands are in {sorted(m.value for m in memories)}; all must be in HBM or all "
                            "in SBUF (mixing memory spaces is not supported)", op=where)
    sbuf = Memory.SBUF in memories
    if sbuf and (call in ("all_to_all", "collective_permute") or len(tensors) > 2):
        raise ArgumentError("SBUF operands take one src and one dst, and not for all_to_all or "
                            "collective_permute; coalesced collectives are HBM only", op=where)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        allowed = (0, 1) if sbuf and kind == "all_gather" else (0,)
        if dim not in allowed or (sbuf and kind == "all_gather" and any(len(t.shape) != 2 for t in tensors)):
            memory = "SBUF (2D tiles)" if sbuf else "HBM"
            raise ArgumentError(f"collective_dim={dim!r}; {kind} on {memory} takes "
                                f"{' or '.join(map(str, allowed))}", op=where)
    launch = backend.core().launch
    for tensor in tensors:
        if tensor.storage.memory is Memory.HBM and tensor.storage.id not in launch.created:
            raise ArgumentError(f"{tensor.name!r} is a kernel input or output; a collective instruction "
                                "cannot read or write IO tensors", op=where,
                                hint="copy it into an nl.ndarray(..., buffer=nl.shared_hbm) first")


def _pairs(value) -> list[tuple[int, int]]:
    if not (isinstance(value, list | tuple) and all(
            isinstance(p, list | tuple) and len(p) == 2 and all(map(_is_rank, p)) for p in value)):
        raise ArgumentError(f"source_target_pairs must be a list of (source, target) ranks, got {value!r}",
                            op="nki.collectives.collective_permute")
    targets = [int(t) for _, t in value]
    if len(set(targets)) != len(targets):
        raise ArgumentError(f"source_target_pairs {value!r} send twice to one rank",
                            op="nki.collectives.collective_permute")
    return [(int(s), int(t)) for s, t in value]


def _channels(call: str, srcs_by_channel, dsts_by_channel, replica_group, channel_ids) -> list:
    """Per channel (src list, dst list); channel_ids consecutive from 0, at most 4 channels when the
    group holds every rank of its node and 2 otherwise."""
    where = f"nki.collectives.{call}"
    if not (all(isinstance(v, list | tuple) for v in (srcs_by_channel, dsts_by_channel, channel_ids))
            and len(srcs_by_channel) == len(dsts_by_channel) == len(channel_ids)):
        raise ArgumentError(f"srcs_by_channel, dsts_by_channel and channel_ids must be lists with one entry "
                            f"per channel, got channel_ids={channel_ids!r}", op=where)
    if list(channel_ids) != list(range(len(channel_ids))):
        raise ArgumentError(f"channel_ids={list(channel_ids)}; they must be consecutive from 0", op=where)
    binding = _binding(call)
    group = _replica_group(replica_group, call).group_of(binding.rank, call, binding.world.size)
    whole_node = len(group) >= binding.machine.ranks_per_node
    limit = 4 if whole_node else 2
    if len(channel_ids) > limit:
        which = "with" if whole_node else "without"
        raise ArgumentError(f"{len(channel_ids)} channels; a replica group {which} every rank of its node "
                            f"has at most {limit}", op=where)
    for srcs, dsts in zip(srcs_by_channel, dsts_by_channel, strict=True):
        if len(_tensors(srcs, "srcs", call)) != 1 or len(_tensors(dsts, "dsts", call)) != 1:
            raise ArgumentError("each channel takes exactly one src and one dst tensor", op=where)
    return list(zip(srcs_by_channel, dsts_by_channel, strict=True))


calls.checked_calls(globals(), "nki.collectives")
# checked_calls wraps functions; a class's initializer is wrapped here, so that an unknown keyword
# is an ArgumentError at the user's line too.
ReplicaGroup.__init__ = calls._checked(ReplicaGroup.__init__, "nki.collectives.ReplicaGroup", {})
