"""Which modules run compiled: those Cython built from their current source.

setup.py compiles MODULES (the scheduler's per-instruction loop) when Cython and a C compiler are
at hand, and puts each compiled module beside its source with a stamp: the SHA-256 of the source
it was compiled from (`stamp_path`). Python would load a compiled module even after its source
changed, so `install` puts a finder first on `sys.meta_path` that loads the compiled module only
when its stamp matches the source as it is now: an edited or newly checked-out source runs as
Python until the next `pip install -e .`. TRNSIM_PYTHON_ONLY=1 runs them all as Python.
The two give the same results; only the speed differs (docs/timing.md).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

from trnsim.config import env_flag

MODULES = ("trnsim.timing.hazards", "trnsim.timing.schedule")
"""Modules setup.py compiles (dotted names; the sources are src/<name with slashes>.py)."""


def source_digest(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


def stamp_path(compiled: Path) -> Path:
    """Where the digest of a compiled module's source is kept: beside it, `<file>.sha256`."""
    return compiled.with_name(compiled.name + ".sha256")


def module_file(name: str, folder: Path, python_only: bool = False) -> Path | None:
    """The file to load module `name` from, in its package's `folder`: the compiled module if
    there is one compiled from the source as it is now, else the source (None: no source)."""
    stem = name.rpartition(".")[2]
    source = folder / f"{stem}.py"
    if not source.exists():
        return None
    if not python_only:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            compiled = folder / f"{stem}{suffix}"
            stamp = stamp_path(compiled)
            if compiled.exists() and stamp.exists() and stamp.read_text().strip() == source_digest(source):
                return compiled
    return source


class _Finder:
    """Finds MODULES only; everything else is left to Python's own finders."""

    def __init__(self, python_only: bool):
        self.python_only = python_only

    def find_spec(self, name, path=None, target=None):
        if name not in MODULES or not path:
            return None
        for folder in path:
            found = module_file(name, Path(folder), self.python_only)
            if found is not None:
                return importlib.util.spec_from_file_location(name, found)
        return None


def install() -> None:
    """Put the finder first on `sys.meta_path` (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder(env_flag("TRNSIM_PYTHON_ONLY")))


def compiled() -> list[str]:
    """The MODULES this process loaded compiled (benchmarks report it beside their figures)."""
    return [name for name in MODULES
            if name in sys.modules and not sys.modules[name].__file__.endswith(".py")]
