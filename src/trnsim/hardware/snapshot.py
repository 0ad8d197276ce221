"""The package's catalog as last built, kept in the cache directory (`trnsim.config`): reading and
checking the TOML data takes about 25 ms, every trnsim process needs it, and it changes only when
trnsim does.

The file's name holds a hash of the data files, of this package's code (which turns them into
specs), of where the data lives and of the Python version, so a snapshot is always the catalog
`load_catalog` would build now. Only a snapshot the user owns and nobody else may write is read
(it is a pickle). Anything that goes wrong with the cache (no home directory, a file that cannot
be read or written) costs the rebuild and nothing else: the catalog is never wrong for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from trnsim.config import cache_directory, write_cache_file

_CODE = Path(__file__).resolve().parent
_DAY_S = 24 * 3600
_KEPT_S = 7 * _DAY_S
"""Snapshots of other versions are deleted after a week unused (another checkout or virtual
environment sharing the cache directory has its own, which it keeps using meanwhile: a read
renews a snapshot's time once a day)."""


def _path(data_dir: Path) -> Path:
    digest = hashlib.sha256(f"{data_dir}\0{sys.version_info[:2]}".encode())
    for path in sorted(_CODE.rglob("*.py")) + sorted(data_dir.rglob("*.toml")):
        digest.update(str(path.relative_to(path.parent.parent)).encode() + b"\0" + path.read_bytes())
    return cache_directory() / f"catalog-{digest.hexdigest()[:16]}.pickle"


def _frozen(items: dict) -> MappingProxyType:
    """A read-only mapping again, when a snapshot is read (pickle cannot name mappingproxy)."""
    return MappingProxyType(items)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))


def _spec(cls: type, values: tuple) -> object:
    """A frozen spec again, when a snapshot is read: its fields set directly, as its own
    `__setstate__` does, without listing the dataclass's fields again for every object."""
    spec = object.__new__(cls)
    for name, value in zip(_field_names(cls), values, strict=True):
        object.__setattr__(spec, name, value)
    return spec


class _Pickler(pickle.Pickler):
    """Read-only mappings and slotted specs (their fields are all they hold) as calls to `_frozen`
    and `_spec`."""

    def reducer_override(self, obj):
        if type(obj) is MappingProxyType:
            return _frozen, (dict(obj),)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and not hasattr(obj, "__dict__"):
            return _spec, (type(obj), tuple(getattr(obj, name) for name in _field_names(type(obj))))
        return NotImplemented


def cached(data_dir: Path, build: Callable[[], object]) -> object:
    """The snapshot of the catalog built from `data_dir`, or `build()`, saved for next time."""
    path = None
    try:
        path = _path(data_dir)
        with path.open("rb") as handle:
            status = os.fstat(handle.fileno())
            if _trusted(status):
                catalog = pickle.load(handle)
                if time.time() - status.st_mtime > _DAY_S:  # in use: not one to drop (`_save`)
                    with contextlib.suppress(OSError):
                        os.utime(path)
                return catalog
    except Exception:  # missing, unreadable, truncated, or from classes that have changed: rebuild
        pass
    catalog = build()
    if path is not None:
        _save(path, catalog)
    return catalog


def _trusted(status: os.stat_result) -> bool:
    """The open file belongs to this user, and no one else may write it."""
    owner = os.getuid() if hasattr(os, "getuid") else status.st_uid
    return status.st_uid == owner and not status.st_mode & 0o022


def _save(path: Path, catalog: object) -> None:
    """Write the snapshot whole or not at all, and drop the unused snapshots of other versions."""
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(catalog)
    except Exception:  # the cache is a convenience: never a reason to fail
        return
    if write_cache_file(path, buffer.getvalue()):
        with contextlib.suppress(OSError):
            for old in path.parent.glob("catalog-*"):
                if old != path and time.time() - old.stat().st_mtime > _KEPT_S:
                    old.unlink(missing_ok=True)
