"""`trnsim run SCRIPT [ARGS...]`: run a Python script on trnsim and profile every kernel launch.

    trnsim run my_kernels.py --size 256                  # the script's `import nki` runs on trnsim
    trnsim run my_kernels.py --target trn1,trn2 --report out/

The script's `import nki` runs on trnsim.nki (NKI 0.6) and its `import neuronxcc.nki` on the old
API's front end (trnsim.nki.legacy), as `trnsim.nki.compat.enable(legacy=True)` does; a real nki
installation is never shadowed (the command stops with an error instead). Every kernel launch
the script makes (simulate, trace or a direct call) is recorded; afterwards each trace is timed
on every target, a summary table is printed, and with `--report DIR` each launch gets
DIR/<kernel>.html (self-contained report) and DIR/<kernel>.json (Perfetto / Chrome trace); a
kernel launched more than once gets <kernel>_1, <kernel>_2, ... Options for trnsim come before
the script name; everything after it goes to the script. `--target` and `--report` are checked
before the script runs, and the report files appear together once every launch is timed (never
a half-written directory).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import runpy
import shutil
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from trnsim import hardware
from trnsim.cli.specs import console as wide_console
from trnsim.errors import ConfigError, SpecError, TrnsimError, UnsupportedError
from trnsim.nki import collectives
from trnsim.reports.kernel import DEFAULT_TARGETS, KernelProfile, safe_name, summary_table, timed_targets
from trnsim.timing.perfetto import write_all
from trnsim.timing.profile import profile_trace


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a script on trnsim and profile its kernels",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=None,
                        help=f"comma-separated targets to time on (default: {','.join(DEFAULT_TARGETS)})")
    parser.add_argument("--report", metavar="DIR", default=None,
                        help="write an HTML report and a Perfetto JSON per kernel launch into DIR")
    parser.add_argument("--no-profile", action="store_true", help="only run the script")
    parser.add_argument("--ranks", type=int, default=1, metavar="N",
                        help="run each kernel launch on N ranks (threads whose nki.collectives meet), every "
                             "rank with the script's arguments; rank 0's result and trace are kept")
    parser.add_argument("script", help="the Python file to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(run=run)


def parse_targets(text: str | None) -> list[str]:
    """"trn1,trn2" -> ["trn1", "trn2"], each a generation trnsim can time; the default when None."""
    if text is None:
        return list(DEFAULT_TARGETS)
    targets = [t.strip() for t in text.split(",") if t.strip()]
    if not targets:
        raise ConfigError(f"--target {text!r} names no target",
                          hint=f"e.g. --target {','.join(DEFAULT_TARGETS)}")
    for target in targets:
        check_target(target)
    return timed_targets(targets)  # one of each core: trn2, TRN2 and NeuronCore-v3 are one


def check_target(name: str) -> None:
    """Refuse a name that is not a timed generation, suggesting target names (not core names)."""
    try:
        core = hardware.core(name)
    except SpecError:
        core = None
    if core is not None and not core.partial:
        return
    close = difflib.get_close_matches(name.strip().lower(), hardware.TARGETS, n=3, cutoff=0.5)
    lead = f"did you mean {', '.join(close)}? " if close else ""
    why = f" ({core.name} has no published timing figures)" if core is not None else ""
    raise ConfigError(f"--target {name!r} is not a target{why}",
                      hint=f"{lead}targets: {', '.join(hardware.TARGETS)}")


def report_directory(text: str | None) -> Path | None:
    """The --report directory as an absolute path (the script may chdir), checked before it runs.

    It may exist (files are added) or not (it is created); it may not be a file, lie under a
    file, or sit where nothing can be written.
    """
    if text is None:
        return None
    if not text.strip():
        raise ConfigError("--report names no directory", hint="e.g. --report out/")
    path = Path(text).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--report {text!r} is an existing file, not a directory",
                          hint="name a directory; it is created if missing")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise ConfigError(f"--report {text!r} cannot be created: {base} is a file")
    try:
        os.rmdir(tempfile.mkdtemp(dir=base, prefix=PROBE_PREFIX))
    except OSError as error:
        raise ConfigError(f"--report {text!r} is not writable: {error.strerror} in {base}") from None
    return path


PROBE_PREFIX = ".trnsim-report-"
"""Name prefix of the hidden directory made and removed to check that --report is writable."""


def _nearest_existing(path: Path) -> Path:
    return next(p for p in (path, *path.parents) if p.exists())


def _own_copy(value):
    """A copy of an array argument (numpy, torch); anything else as it is."""
    if hasattr(value, "clone"):
        return value.clone()
    return value.copy() if hasattr(value, "copy") and hasattr(value, "shape") else value


@contextlib.contextmanager
def recording_launches(ranks: int = 1):
    """Collect (kernel name, trace) for every launch made inside the block.

    Every way of launching a kernel (`kernel(...)`, `simulate`, `trace`) goes through
    `trnsim.nki.jit.run`; the block wraps it and restores it afterwards. With `ranks` > 1 a
    launch with values runs on that many ranks (trnsim.system.launch); rank 0's is recorded.
    """
    jit = importlib.import_module("trnsim.nki.jit")  # the module; `trnsim.nki.jit` is also a function
    launches: list[tuple[str, object]] = []
    original = jit.run

    def recorded(kernel, *args, **kwargs):
        if ranks > 1 and kwargs.get("with_values") and collectives.bound() is None:
            from trnsim import system

            arguments, keywords = args
            target = jit.resolve_target(kwargs.get("target"))
            # rank 0 runs on the caller's arrays (its in-place writes land there, as with one
            # rank); every other rank on copies of its own, so no two ranks share an input
            per_rank = [tuple(arguments)] + [tuple(map(_own_copy, arguments)) for _ in range(ranks - 1)]
            results = system.launch(kernel, ranks, per_rank, target=target, **keywords)
            kernel.last_trace = results.traces[0]
            if not _is_builtin(kernel):
                launches.append((getattr(kernel, "__name__", "kernel"), results.traces[0]))
            return results[0]
        result = original(kernel, *args, **kwargs)
        if collectives.bound() is not None:  # one rank of a multi-rank launch: recorded once, above
            return result
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


def check_script(script: str) -> None:
    if Path(script).is_dir():
        raise ConfigError(f"script {script!r} is a directory", hint="give the Python file to run")
    if not Path(script).is_file():
        raise ConfigError(f"script {script!r} does not exist")


def run_script(script: str, script_args: list[str]) -> int:
    """Run `script` as __main__ with the nki aliases on; its exit code.

    As with `python script.py`, an exception the script does not catch prints the script's
    traceback (from its own frame on) and gives exit code 1; a TrnsimError goes to the caller,
    which prints it as one line naming the kernel line.
    """
    from trnsim.nki import compat

    check_script(script)
    compat.enable(legacy=True)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))  # as `python script.py` does
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        return _exit_code(stop.code)
    except TrnsimError:
        raise
    except Exception as error:
        _print_script_traceback(error, script)
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def _exit_code(code: object) -> int:
    """The status `sys.exit(code)` gives, printing a message code to stderr as Python does."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _print_script_traceback(error: Exception, script: str) -> None:
    """The traceback from the script's own frame on, without the frames of `trnsim run`."""
    frames = error.__traceback__
    target = Path(script).resolve()
    while frames is not None and Path(frames.tb_frame.f_code.co_filename).resolve() != target:
        frames = frames.tb_next
    traceback.print_exception(type(error), error, frames)


def launch_labels(names: list[str]) -> list[str]:
    """Kernel names, numbered (`k#1`, `k#2`) when one kernel was launched more than once; a
    number that another kernel's own name holds (a kernel named `k#1`) is skipped, so every label
    is distinct and a kernel launched once keeps its name."""
    counts = Counter(names)
    taken = {name for name in names if counts[name] == 1}
    numbers: dict[str, int] = {}
    labels = []
    for name in names:
        label = name
        while counts[name] > 1 and (label == name or label in taken):
            numbers[name] = numbers.get(name, 0) + 1
            label = f"{name}#{numbers[name]}"
        taken.add(label)
        labels.append(label)
    return labels


def profile_launches(launches, targets: list[str], console: Console) -> list[KernelProfile]:
    """Time every recorded trace on every target, with a progress bar on stderr.

    A target that lacks an instruction of the trace (a trn3-only one timed for trn1) is
    skipped for that kernel with a note; the other targets are still timed.
    """
    profiles = []
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("timing kernels", total=len(launches) * len(targets))
        for label, (_, trace) in zip(launch_labels([name for name, _ in launches]), launches, strict=True):
            results = {}
            for target in targets:
                progress.update(task, description=f"timing {label} on {target} "
                                                  f"({len(trace)} instructions)")
                try:
                    results.update(profile_trace(trace, [target]))
                except UnsupportedError as error:
                    console.print(f"trnsim run: {label} not timed on {target}: {error.message}",
                                  markup=False, soft_wrap=True)
                progress.advance(task)
            if results:
                profiles.append(KernelProfile(name=label, trace=trace, results=results))
    return profiles


def unique_stems(labels: list[str]) -> list[str]:
    """A file stem per launch label, distinct even where two labels differ only in characters a
    file name cannot hold (`k#1` and `k_1`), or in case. A label that is a file name already
    (a kernel launched once, named so) keeps it; any other (`k#2`, `..`) that would take another's
    stem gets -2, -3, ..."""
    taken: set[str] = set()
    stems: list[str | None] = [None] * len(labels)
    plain_first = sorted(range(len(labels)), key=lambda index: safe_name(labels[index]) != labels[index])
    for index in plain_first:
        stem = base = safe_name(labels[index])
        number = 2
        while stem.lower() in taken:
            stem, number = f"{base}-{number}", number + 1
        taken.add(stem.lower())
        stems[index] = stem
    return stems


def write_reports(profiles: list[KernelProfile], directory: Path) -> list[Path]:
    """Every launch's HTML and Perfetto files into `directory`, which gets all of them or none
    (`write_all`); on a failure the directories this call created are removed again."""
    base = _nearest_existing(directory)
    created = None if directory == base else base / directory.relative_to(base).parts[0]
    stems = unique_stems([item.name for item in profiles])
    files: dict[Path, str] = {}
    for item, stem in zip(profiles, stems, strict=True):
        files.update(item.files(directory, stem))
    try:
        return write_all(files)
    except ConfigError:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise


def run(args) -> int:
    targets = parse_targets(args.target)
    report = report_directory(args.report)
    if report is not None and args.no_profile:
        raise ConfigError("--report needs the profile that --no-profile turns off", hint="drop one of them")
    check_script(args.script)
    if args.ranks < 1:
        raise ConfigError(f"--ranks {args.ranks}: a launch needs at least one rank")
    with recording_launches(args.ranks) as launches:
        code = run_script(args.script, args.script_args)
    if args.no_profile:
        return code
    notes = wide_console(stderr=True)
    if not launches:
        if code == 0:
            notes.print("trnsim run: the script launched no NKI kernel; nothing to profile", soft_wrap=True)
        return code
    profiles = profile_launches(launches, targets, notes)
    wide_console().print(summary_table(profiles))
    if report is not None:
        for path in write_reports(profiles, report):
            notes.print(f"wrote {path}", markup=False, soft_wrap=True)
    return code
