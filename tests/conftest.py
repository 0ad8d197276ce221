"""Settings for the whole suite."""

import os
import shutil
import tempfile

_saved: dict = {}


def pytest_configure(config):
    """trnsim's cache directory (the catalog snapshot, the planner's op costs) in a temporary
    folder from before collection on: the tests neither read what earlier runs left in
    ~/.cache/trnsim nor change it, and subprocesses they start inherit the setting."""
    _saved["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME")
    _saved["folder"] = tempfile.mkdtemp(prefix="trnsim-test-cache-")
    os.environ["XDG_CACHE_HOME"] = _saved["folder"]


def pytest_unconfigure(config):
    if _saved.get("XDG_CACHE_HOME") is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = _saved["XDG_CACHE_HOME"]
    shutil.rmtree(_saved.get("folder", ""), ignore_errors=True)
