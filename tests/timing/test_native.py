"""The compiled scheduler (setup.py, trnsim._native): loaded only when built from the source as it
is now, and giving the same timelines as the Python it was compiled from."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import golden_timings

from trnsim import _native
from trnsim.timing.schedule import schedule

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
NAME = "trnsim.timing.schedule"


def _files(folder: Path, stamp: str | None) -> tuple[Path, Path]:
    """A source and a compiled module beside it, stamped with `stamp` ("source": the source's
    digest; None: no stamp)."""
    source, compiled = folder / "schedule.py", folder / f"schedule{SUFFIX}"
    source.write_text("x = 1\n")
    compiled.write_bytes(b"")
    if stamp is not None:
        digest = _native.source_digest(source) if stamp == "source" else stamp
        _native.stamp_path(compiled).write_text(digest + "\n")
    return source, compiled


def test_a_module_compiled_from_its_source_as_it_is_is_loaded(tmp_path):
    _source, compiled = _files(tmp_path, "source")
    assert _native.module_file(NAME, tmp_path) == compiled


def test_a_source_edited_after_the_build_runs_as_python(tmp_path):
    source, _compiled = _files(tmp_path, "source")
    source.write_text("x = 2\n")
    assert _native.module_file(NAME, tmp_path) == source


def test_a_compiled_module_without_a_stamp_or_with_another_is_not_loaded(tmp_path):
    source, compiled = _files(tmp_path, None)
    assert _native.module_file(NAME, tmp_path) == source
    _native.stamp_path(compiled).write_text("0" * 64 + "\n")
    assert _native.module_file(NAME, tmp_path) == source


def test_python_only_and_unbuilt_modules_load_the_source(tmp_path):
    source, compiled = _files(tmp_path, "source")
    assert _native.module_file(NAME, tmp_path, python_only=True) == source
    compiled.unlink()
    assert _native.module_file(NAME, tmp_path) == source
    assert _native.module_file(NAME, tmp_path / "elsewhere") is None


def test_python_only_runs_every_compiled_module_from_its_source():
    code = ("import json, trnsim._native as n, trnsim.timing.schedule, trnsim.timing.hazards; "
            "print(json.dumps(n.compiled()))")
    env = dict(os.environ, TRNSIM_PYTHON_ONLY="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def _timelines() -> dict:
    """start/end of every instruction of the tutorial kernels (small size) on three targets."""
    traces = golden_timings.tutorial_module().traces("small")
    return {f"{name} {target}": [[float(x).hex() for x in timeline.start_s],
                                 [float(x).hex() for x in timeline.end_s], timeline.waited_on.tolist()]
            for name, trace in traces.items() for target in golden_timings.TARGETS
            for timeline in [schedule(trace, target)]}


def test_the_python_scheduler_gives_the_compiled_ones_timelines_bit_for_bit():
    # This process runs what the finder picks: the compiled modules wherever the install built them.
    for name in _native.MODULES:
        module = sys.modules[name] if name in sys.modules else importlib.import_module(name)
        folder = Path(module.__file__).parent
        assert Path(module.__file__) == _native.module_file(name, folder)
    here = Path(golden_timings.__file__).parent
    code = (f"import json, sys; sys.path.insert(0, {str(here)!r}); import test_native; "
            "print(json.dumps(test_native._timelines()))")
    env = dict(os.environ, TRNSIM_PYTHON_ONLY="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == _timelines()
