"""`trnsim run SCRIPT [ARGS...]`: run a Python script on trnsim and profile every kernel launch.

    trnsim run my_kernels.py --size 256                  # the script's `import nki` runs on trnsim
    trnsim run my_kernels.py --target trn1,trn2 --report out/

The script's `import nki` (and the old `neuronxcc.nki`) is aliased to trnsim.nki, as
`trnsim.nki.compat.enable()` does; a real nki installation is never shadowed (the command stops
with an error instead). Every kernel launch the script makes (simulate, trace or a direct call)
is recorded; afterwards each trace is timed on every target, a summary table is printed, and with
`--report DIR` each launch gets DIR/<kernel>.html (self-contained report) and DIR/<kernel>.json
(Perfetto / Chrome trace). Options for trnsim come before the script name; everything after it
goes to the script.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import runpy
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from trnsim.core.profile import profile_trace
from trnsim.errors import ConfigError, UnsupportedError
from trnsim.reports.kernel import DEFAULT_TARGETS, KernelProfile, summary_table


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a script on trnsim and profile its kernels",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=None,
                        help=f"comma-separated targets to time on (default: {','.join(DEFAULT_TARGETS)})")
    parser.add_argument("--report", metavar="DIR", default=None,
                        help="write an HTML report and a Perfetto JSON per kernel launch into DIR")
    parser.add_argument("--no-profile", action="store_true", help="only run the script")
    parser.add_argument("script", help="the Python file to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(run=run)


def parse_targets(text: str | None) -> list[str]:
    """"trn1,trn2" -> ["trn1", "trn2"], each checked against the hardware catalog."""
    from trnsim import hardware

    targets = [t.strip() for t in (text or ",".join(DEFAULT_TARGETS)).split(",") if t.strip()]
    if not targets:
        raise ConfigError(f"--target {text!r} names no target", hint="e.g. --target trn1,trn2")
    for target in targets:
        hardware.core(target)  # raises SpecError with close matches for a typo
    return targets


@contextlib.contextmanager
def recording_launches():
    """Collect (kernel name, trace) for every launch made inside the block.

    Every way of launching a kernel (`kernel(...)`, `simulate`, `trace`) goes through
    `trnsim.nki.jit.run`; the block wraps it and restores it afterwards.
    """
    jit = importlib.import_module("trnsim.nki.jit")  # the module; `trnsim.nki.jit` is also a function
    launches: list[tuple[str, object]] = []
    original = jit.run

    def recorded(kernel, *args, **kwargs):
        result = original(kernel, *args, **kwargs)
        if not _is_builtin(kernel):
            launches.append((getattr(kernel, "__name__", "kernel"), kernel.last_trace))
        return result

    jit.run = recorded
    try:
        yield launches
    finally:
        jit.run = original


def _is_builtin(kernel) -> bool:
    """trnsim's own kernels (the torch device times its ops with them) are not the user's launches."""
    return getattr(kernel, "__module__", "").startswith("trnsim.")


def run_script(script: str, script_args: list[str]) -> int:
    """Run `script` as __main__ with the nki aliases on; its exit code."""
    from trnsim.nki import compat

    if not Path(script).is_file():
        raise ConfigError(f"script {script!r} does not exist")
    compat.enable()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))  # as `python script.py` does
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def _labels(launches: list[tuple[str, object]]) -> list[str]:
    """Kernel names, numbered when one kernel was launched more than once."""
    names = [name for name, _ in launches]
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        labels.append(f"{name}#{seen[name]}" if names.count(name) > 1 else name)
    return labels


def profile_launches(launches, targets: list[str], console: Console) -> list[KernelProfile]:
    """Time every recorded trace on every target, with a progress bar on stderr.

    A target that lacks an instruction of the trace (a trn3-only one timed for trn1) is
    skipped for that kernel with a note; the other targets are still timed.
    """
    profiles = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("timing kernels", total=len(launches) * len(targets))
        for label, (_, trace) in zip(_labels(launches), launches, strict=True):
            results = {}
            for target in targets:
                progress.update(task, description=f"timing {label} on {target} "
                                                  f"({len(trace)} instructions)")
                try:
                    results.update(profile_trace(trace, [target]))
                except UnsupportedError as error:
                    console.print(f"trnsim run: {label} not timed on {target}: {error.message}")
                progress.advance(task)
            if results:
                profiles.append(KernelProfile(name=label, trace=trace, results=results))
    return profiles


def run(args) -> int:
    targets = parse_targets(args.target)
    with recording_launches() as launches:
        code = run_script(args.script, args.script_args)
    if args.no_profile:
        return code
    console = Console(stderr=True)
    if not launches:
        console.print("trnsim run: the script launched no NKI kernel; nothing to profile")
        return code
    profiles = profile_launches(launches, targets, console)
    Console().print(summary_table(profiles))
    if args.report:
        for item in profiles:
            page, events = item.write(args.report)
            console.print(f"wrote {page} and {events}")
    return code
