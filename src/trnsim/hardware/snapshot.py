"""The package's catalog as last built, kept in the cache directory (`trnsim.config`): reading and
checking the TOML data takes about 25 ms, every trnsim process needs it, and it changes only when
trnsim does.

The file's name holds a hash of the data files, of this package's code (which turns them into
specs) and of where the data lives, so a snapshot is always the catalog `load_catalog` would build
now. One that cannot be read is rebuilt; one that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from trnsim.config import cache_directory

_CODE = Path(__file__).resolve().parent


def _digest(data_dir: Path) -> str:
    digest = hashlib.sha256(str(data_dir).encode())
    for path in sorted(_CODE.glob("*.py")) + sorted(data_dir.glob("*.toml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _frozen(items: dict) -> MappingProxyType:
    """A read-only mapping again, when a snapshot is read (pickle cannot name mappingproxy)."""
    return MappingProxyType(items)


def cached(data_dir: Path, build: Callable[[], object]) -> object:
    """The snapshot of the catalog built from `data_dir`, or `build()`, saved for next time."""
    path = cache_directory() / f"catalog-{_digest(data_dir)}.pickle"
    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    except Exception:  # missing, unreadable, truncated, or from classes that have changed: rebuild
        pass
    catalog = build()
    _save(path, catalog)
    return catalog


def _save(path: Path, catalog: object) -> None:
    """Write the snapshot whole or not at all, and drop the snapshots of other versions."""
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with temporary.open("wb") as handle:
            pickler = pickle.Pickler(handle, protocol=pickle.HIGHEST_PROTOCOL)
            pickler.dispatch_table = {MappingProxyType: lambda proxy: (_frozen, (dict(proxy),))}
            pickler.dump(catalog)
        temporary.replace(path)
        for old in path.parent.glob("catalog-*.pickle"):
            if old != path:
                old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError):
        with contextlib.suppress(OSError):  # nothing was written, or the directory is not one
            temporary.unlink(missing_ok=True)
