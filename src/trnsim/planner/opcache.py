"""Op costs remembered across runs: trnsim.cost's fast tier takes a fraction of a second per new
shape, and a plan search asks for the same few hundred shapes every time.

The file lives in trnsim's cache directory (`trnsim.config.cache_directory`) and is keyed
by a hash of the sources that decide a cost (cost/, timing/, the hardware data): any change to
them starts a fresh cache, so a remembered value is always what the library would answer now.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

import trnsim
from trnsim.config import cache_directory, write_cache_file

_INPUTS = ("cost", "timing", "hardware/data", "nki", "core")


@cache
def _version() -> str:
    """Hash of every source file the op costs depend on."""
    root = Path(trnsim.__file__).parent
    digest = hashlib.sha256()
    for folder in _INPUTS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".toml", ".csv"):
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _path() -> Path:
    return cache_directory() / f"planner-opcosts-{_version()}.json"


@cache
def _table() -> dict[str, float]:
    try:
        return json.loads(_path().read_text())
    except (OSError, ValueError, RuntimeError):  # RuntimeError: no home directory to cache in
        return {}


def lookup(key: str) -> float | None:
    return _table().get(key)


def remember(key: str, seconds: float) -> None:
    """Record one cost and rewrite the file (atomically; a cache that cannot be written is skipped)."""
    table = _table()
    table[key] = seconds
    try:
        path = _path()
        if not path.exists():  # a new version: the caches of older sources are dead weight
            for old in path.parent.glob("planner-opcosts-*.json"):
                old.unlink(missing_ok=True)
    except (OSError, RuntimeError):  # RuntimeError: no home directory to cache in
        return
    write_cache_file(path, json.dumps(table).encode())
