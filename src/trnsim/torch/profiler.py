"""`trnsim.torch.profile()`: device time and cost of the aten ops run on neuron inside a block.

    with trnsim.torch.profile(target="trn2") as prof:
        train_step()
    prof.total_s, prof.matmul_share, prof.cost_usd   # on trn2
    prof.report("trn1").total_s                      # the same ops re-timed on trn1

Recording keeps only each op's name and tensor shapes (cheap, target-free); times come when a report
is asked for, from `trnsim.torch.devicetime` (built-in NKI kernels timed by the kernel timing
model). Ops that fell back to CPU, have no kernel recipe, or whose kernel the cost library cannot
cost (integer matmuls) are counted as untimed, not guessed.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import sys
from dataclasses import dataclass

import torch

from trnsim import config, hardware
from trnsim.errors import ConfigError, SpecError
from trnsim.torch import collectives, native

ACTIVE: contextvars.ContextVar[Profile | None] = contextvars.ContextVar("trnsim_torch_profile", default=None)
# Profiles open in any thread, innermost last: threads that did not open one (autograd's backward
# workers, DataLoader threads, threads an op spawns) record into the innermost.
OPEN: list[Profile] = []
DEFAULT_TARGET = "trn2"
_WAIT = torch.ops._c10d_functional.wait_tensor.default


def _spec(value) -> tuple | None:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), str(value.dtype).removeprefix("torch.")
    if type(value) in (list, tuple) and value:  # a list of tensors, or of lists of them (all_gather's)
        inner = tuple(map(_spec, value))
        return inner if all(spec is not None for spec in inner) else None
    return None


def _tensors(values):
    for value in values:
        yield from (value if type(value) in (list, tuple) else (value,))


def _pending_type():
    """The type of a functional collective's pending result (None until that module is loaded:
    then no such result exists, and `import torch` need not load it)."""
    module = sys.modules.get("torch.distributed._functional_collectives")
    return module.AsyncCollectiveTensor if module is not None else None


def _real(values) -> bool:
    """True when every tensor among `values` (lists included) holds values: a plain tensor or
    parameter (not a fake or functional one), or the pending result of a functional collective
    (which waits for it when read)."""
    allowed = (torch.Tensor, torch.nn.Parameter, _pending_type())
    return not any(isinstance(v, torch.Tensor) and type(v) not in allowed for v in _tensors(values))


def signature(values) -> tuple:
    """(shape, dtype name) of each tensor in `values`; a list of tensors becomes a tuple of them."""
    return tuple(spec for spec in map(_spec, values) if spec is not None)


def output_signature(out) -> tuple:
    if isinstance(out, torch.Tensor):
        return (_spec(out),)
    if type(out) in (list, tuple):
        return signature(out)
    return ()


@dataclass(frozen=True, kw_only=True)
class OpTime:
    """One aten overload's share of a profile."""

    op: str
    count: int
    device_s: float
    matmul_s: float


@dataclass(frozen=True, kw_only=True)
class Report:
    """A profile timed on one target: per-op and total device time, matmul share and cost."""

    target: str
    lnc: int
    instance: str | None
    usd_per_hour: float | None
    cores_per_instance: int | None
    ops: tuple[OpTime, ...]
    untimed: dict[str, int]
    comms: tuple[OpTime, ...] = ()
    step_s: float = 0.0

    @property
    def total_s(self) -> float:
        return sum(op.device_s for op in self.ops)

    @property
    def matmul_s(self) -> float:
        return sum(op.matmul_s for op in self.ops)

    @property
    def matmul_share(self) -> float:
        """Fraction of device time spent in matmul kernels (TensorE work), 0 when nothing ran."""
        return self.matmul_s / self.total_s if self.total_s else 0.0

    @property
    def comm_s(self) -> float:
        """Time of the collectives (trnsim.system's model on the instance), apart from compute."""
        return sum(op.device_s for op in self.comms)

    @property
    def overlap_s(self) -> float:
        """Communication hidden behind compute: compute + communication - the block's time, kept
        within [0, the smaller part] (the two sums add the same times in different orders, so
        without collectives they can differ in the last bit)."""
        return max(0.0, min(self.total_s + self.comm_s - self.step_s, self.total_s, self.comm_s))

    @property
    def step_cost_usd(self) -> float:
        """The block's time (compute and communication, overlapped) at one core's price."""
        return self.step_s * self._price() / 3600 / self.cores_per_instance

    def job(self, group=None) -> collectives.JobReport:
        """Every rank's compute, communication and overlap, and the job's step time and price
        (a collective call: every rank of `group`, default the world, must make it)."""
        return collectives.job_report(self, group)

    @property
    def per_op(self) -> dict[str, OpTime]:
        return {op.op: op for op in self.ops}

    @property
    def instance_cost_usd(self) -> float:
        """Price of the whole instance for the device time (what a job using it alone pays)."""
        return self.total_s * self._price() / 3600

    @property
    def cost_usd(self) -> float:
        """Price of the one (logical) core the ops ran on, as its share of the instance's price."""
        return self.instance_cost_usd / self.cores_per_instance

    def _price(self) -> float:
        if self.usd_per_hour is None:
            raise SpecError(f"no on-demand price for target {self.target!r} in the hardware catalog",
                            hint="pass instance= naming a priced instance of that chip (the catalog has "
                            "none for trn3)")
        return self.usd_per_hour

    def table(self, top: int = 15) -> str:
        """The most expensive ops, as plain text: a header with the totals (and the cost where the
        instance has a price), then per op its calls, device time and share of the total."""
        header = (f"device time on {self.target} (lnc={self.lnc}): {self.total_s * 1e3:.3f} ms, "
                  f"matmul share {self.matmul_share:.1%}")
        if self.usd_per_hour is not None:
            header += f", ${self.cost_usd:.3g} (one core's share of {self.instance})"
        lines = [header, f"  {'op':<55} {'calls':<6} {'device time':>12} {'share':>6}"]
        for op in self.ops[:top]:
            share = op.device_s / self.total_s if self.total_s else 0.0
            lines.append(f"  {op.op:<55} x{op.count:<5} {op.device_s * 1e6:9.1f} us {share:6.1%}")
        if self.comms:
            calls = sum(op.count for op in self.comms)
            lines.append(f"  collectives: {calls} calls, {self.comm_s * 1e3:.3f} ms, "
                         f"{self.overlap_s * 1e3:.3f} ms overlapped; block {self.step_s * 1e3:.3f} ms")
        if self.untimed:
            calls = sum(self.untimed.values())
            lines.append(f"  untimed (ran on CPU, no kernel recipe or no cost): {calls} ops")
        return "\n".join(lines)


def default_instance(target: str) -> hardware.InstanceSpec | None:
    """The largest priced instance built from `target`'s chip (cheapest among equals), if any."""
    core = hardware.core(target)
    priced = [i for i in hardware.instances()
              if i.chip is not None and i.chip.core.name == core.name and i.usd_per_hour is not None]
    if not priced:
        return None
    return min(priced, key=lambda i: (-i.accelerators, i.usd_per_hour))


def _add(entry: list, count: int, device_s: float, matmul_s: float) -> None:
    entry[0], entry[1], entry[2] = entry[0] + count, entry[1] + count * device_s, entry[2] + count * matmul_s


def _op_times(per_op: dict) -> tuple[OpTime, ...]:
    return tuple(sorted((OpTime(op=op, count=c, device_s=s, matmul_s=m) for op, (c, s, m) in per_op.items()),
                        key=lambda o: -o.device_s))


class Profile:
    """What ran on neuron inside a `profile` block; `report(target)` times it."""

    def __init__(self, *, target: str, lnc: int, instance: str | None):
        hardware.core(target)
        _pricing_instance(target, lnc, instance)  # a bad instance or lnc is refused when the block opens
        self.target, self.lnc, self.instance = target, lnc, instance
        self.counts: collections.Counter = collections.Counter()
        self.kernel_traces: list[tuple[str, object]] = []
        self.sequence: list[tuple] = []  # the recorded keys in the order they ran
        self.outer: Profile | None = None  # an enclosing block's profile, which sees these ops too
        self.waited: set[int] = set()  # functional collectives' results already waited for

    def record(self, func, args, out) -> None:
        """Note one op run on real buffers (dispatch calls this for every op while active).

        Ops seen while torch.compile traces (fake or functional buffers) did not run; skip them.
        """
        if not _real(args):
            return
        pending = _pending_type()
        if pending is not None and func is not _WAIT:  # reading a collective's result waits for it
            for value in _tensors(args):
                if type(value) is pending and id(value) not in self.waited:
                    self.waited.add(id(value))
                    self.record(_WAIT, (value,), value)
        key = (str(func), signature(args), output_signature(out))
        if collectives.is_collective(func):
            key += (collectives.group_of(args),)
        self.record_key(key)

    def record_key(self, key: tuple) -> None:
        """Note one op by its (op, input signature, output signature) key: a compiled graph's
        nodes, whose buffers this process never sees (torch/inductor.py)."""
        self.counts[key] += 1
        self.sequence.append(key)
        if self.outer is not None:
            self.outer.record_key(key)

    def record_trace(self, name: str, trace) -> None:
        """Note one NKI kernel launch (`trnsim.torch.nki_call`) by its instruction trace."""
        self.kernel_traces.append((name, trace))
        if self.outer is not None:
            self.outer.record_trace(name, trace)

    def report(self, target: str | None = None, lnc: int | None = None,
               instance: str | None = None) -> Report:
        # Imported here: the timing model is only needed once a report is asked for.
        from trnsim.core.isa import MATMUL
        from trnsim.timing import schedule

        target, lnc = target or self.target, self.lnc if lnc is None else lnc
        spec = _pricing_instance(target, lnc, instance or self._instance_for(target))
        untimed: collections.Counter = collections.Counter()
        seconds = self._seconds(target, lnc, target if spec is None else spec.name, untimed)
        per_op: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
        per_comm: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for key, (device_s, matmul_s) in seconds.items():
            _add((per_comm if len(key) == 4 else per_op)[key[0]], self.counts[key], device_s, matmul_s)
        kernels_s = 0.0
        for name, trace in self.kernel_traces:
            kernel_s = schedule.latency_s(trace, target)
            matmul = kernel_s if any(ins.opcode in MATMUL for ins in trace) else 0.0
            kernels_s += kernel_s
            _add(per_op[name], 1, kernel_s, matmul)
        waits = {key for key in self.counts if len(key) == 4 and key[0].split(".")[1] in collectives.WAITS}
        step_s = kernels_s + collectives.step_s(self.sequence, {k: v[0] for k, v in seconds.items()},
                                                {key for key in self.counts if len(key) == 4}, waits)
        cores = None if spec is None else (spec.logical_cores if lnc == 2 else spec.cores)
        return Report(target=target, lnc=lnc, instance=None if spec is None else spec.name,
                      usd_per_hour=None if spec is None else spec.usd_per_hour, cores_per_instance=cores,
                      ops=_op_times(per_op), untimed=dict(untimed), comms=_op_times(per_comm), step_s=step_s)

    def _instance_for(self, target: str) -> str | None:
        """The profile's own instance prices its own target; another target gets its chip's default
        (the profile's instance holds other NeuronCores)."""
        return self.instance if target == self.target else None

    def _seconds(self, target: str, lnc: int, instance: str, untimed: collections.Counter) -> dict:
        """(device seconds, matmul seconds) of one call of each recorded op; ops that cannot be
        timed (fallen back to CPU, no kernel recipe, a kernel the cost library cannot cost such as an
        integer matmul, a collective the model lacks) go to `untimed`."""
        from trnsim.torch import devicetime, fallback

        fallen, found = fallback.counts(), {}
        for key, count in self.counts.items():
            op, inputs, outputs = key[:3]
            if len(key) == 4:
                comm_s = collectives.time_s(op, inputs, outputs, key[3], instance, collectives.lnc_setting())
                if comm_s is None:
                    untimed[op] += count
                else:
                    found[key] = (comm_s, 0.0)
                continue
            launches = devicetime.launches(op, inputs, outputs)
            uncostable = not all(map(devicetime.costable, launches))
            if uncostable or not launches and (op in fallen or not devicetime.is_free(op)):
                untimed[op] += count
                continue
            times = [(launch.family, devicetime.launch_time_s(launch, target, lnc)) for launch in launches]
            found[key] = (sum(t for _, t in times), sum(t for family, t in times if family == "matmul"))
        return found

    @property
    def total_s(self) -> float:
        return self.report().total_s

    @property
    def matmul_share(self) -> float:
        return self.report().matmul_share

    @property
    def cost_usd(self) -> float:
        return self.report().cost_usd


def _pricing_instance(target: str, lnc: int, instance: str | None):
    """The instance whose price a report uses (None: no priced instance of the target's chip);
    ConfigError for an lnc other than 1 or 2, an instance without NeuronCores, an instance whose
    NeuronCores are another generation than the target's (their price is not the target's), or
    lnc=2 where the instance has no logical cores."""
    if lnc not in (1, 2):
        raise ConfigError(f"lnc={lnc!r}: a logical core is 1 or 2 physical cores")
    spec = hardware.instance(instance) if instance else default_instance(target)
    if spec is not None and spec.chip is None:
        raise ConfigError(f"instance {spec.name} has no NeuronCores to price a core's share of",
                          hint="name a Trainium or Inferentia instance")
    core = hardware.core(target)
    if spec is not None and spec.chip.core.name != core.name:
        raise ConfigError(f"instance {spec.name} has {spec.chip.core.name} cores, not {target}'s "
                          f"{core.name}: its price is not that of the cores timed",
                          hint=f"name an instance of {target}'s chip, or leave instance= out")
    if lnc == 2 and spec is not None and not spec.logical_cores:
        raise ConfigError(f"{spec.name} has no logical cores (LNC=2)", hint="use lnc=1 or a trn2/trn3 target")
    return spec


@contextlib.contextmanager
def profile(target: str | None = None, lnc: int = 1, instance: str | None = None):
    """Record the ops run on neuron inside the block; yields the `Profile`.

    target: "trn1", "trn2" or "trn3" (default TRNSIM_TARGET, else trn2); lnc: 1 core or 2 (one
    logical core of two physical ones); instance: whose price the cost uses (default: the largest
    priced instance of that chip).
    """
    recorder = Profile(target=target or config.current().target or DEFAULT_TARGET, lnc=lnc, instance=instance)
    recorder.outer = current()
    token = ACTIVE.set(recorder)
    OPEN.append(recorder)
    native.record_ops(True)
    try:
        yield recorder
    finally:
        OPEN.remove(recorder)
        native.record_ops(bool(OPEN))
        ACTIVE.reset(token)


def current() -> Profile | None:
    """The profile ops of this thread record into: its own block's, else the innermost open one."""
    active = ACTIVE.get()
    if active is None and OPEN:
        return OPEN[-1]
    return active
