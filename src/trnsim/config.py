"""The few settings trnsim reads from the environment, each overridable in a `with` block.

    with trnsim.config.override(strict=True):
        ...   # reads of never-written memory raise here

Environment: TRNSIM_TARGET (default generation, e.g. "trn2"), TRNSIM_STRICT (1 = raise on reading
uninitialised memory), TRNSIM_DEBUG (1 = keep full tracebacks in the CLI), TRNSIM_EAGER (1 = execute
each kernel instruction when it is issued instead of running matmul GEMMs on worker threads; strict
implies it), TRNSIM_PYTHON_ONLY (1 = run the modules setup.py compiles as Python: `trnsim._native`).
XDG_CACHE_HOME places the cache directory (`cache_directory`).
NKI's own NEURON_PLATFORM_TARGET_OVERRIDE is read by trnsim.nki, and
NEURON_RT_STOCHASTIC_ROUNDING_EN / NEURON_RT_STOCHASTIC_ROUNDING_SEED by trnsim.numerics, where
those meanings live.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import tempfile
from dataclasses import dataclass, fields, replace
from pathlib import Path

from trnsim.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, kw_only=True)
class Settings:
    target: str | None = None
    strict: bool = False
    debug: bool = False
    eager: bool = False


def env_flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a flag", hint="use 1 or 0")


def from_env() -> Settings:
    """Settings as the environment gives them, with defaults for what is not set."""
    return Settings(target=os.environ.get("TRNSIM_TARGET") or None,
                    strict=env_flag("TRNSIM_STRICT"), debug=env_flag("TRNSIM_DEBUG"),
                    eager=env_flag("TRNSIM_EAGER"))


_overrides: contextvars.ContextVar[tuple] = contextvars.ContextVar("trnsim_overrides", default=())


def current() -> Settings:
    """The settings in force here: the environment, then any enclosing `override` blocks."""
    return replace(from_env(), **dict(_overrides.get()))


@contextlib.contextmanager
def override(**changes):
    """Change settings for the code inside the block (and only there)."""
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown}", hint=f"known: {sorted(known)}")
    token = _overrides.set((*_overrides.get(), *changes.items()))
    try:
        yield current()
    finally:
        _overrides.reset(token)


def cache_directory() -> Path:
    """Where trnsim keeps what it can rebuild (the built hardware catalog, the planner's op costs):
    $XDG_CACHE_HOME/trnsim, else ~/.cache/trnsim. Every file in it is keyed by a hash of what
    made it, so deleting the directory is always safe."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trnsim"


def write_cache_file(path: Path, data: bytes) -> bool:
    """Write one file of the cache directory whole or not at all: a private temporary file beside
    it, then renamed over it. False, leaving nothing behind, when it cannot be written."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f"{path.stem}-", suffix=".tmp", dir=path.parent)
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
        return True
    except OSError:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        return False
