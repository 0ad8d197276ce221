"""Opt-in aliases so kernels written for AWS's `nki` package run on trnsim unchanged.

    import trnsim.nki.compat
    trnsim.nki.compat.enable()        # or: with trnsim.nki.compat.enabled(): ...
    import nki, nki.language as nl, nki.isa as nisa    # these are trnsim.nki modules now

or from the shell: `trnsim run kernel_script.py`. The aliases cover `nki` and every
`nki.<module>` trnsim has (`nki.language`, `nki.isa`, `nki.typing`, ...; `nki.isa.constants` is
trnsim.nki.isa_constants, the ISA enums) and the same under the old `neuronxcc.nki` path. They are
installed by an import hook (no top-level package named `nki` exists in trnsim), and enabling
refuses when a real `nki` or `neuronxcc` is importable, so a real installation is never shadowed
silently. `enable_legacy()` maps `neuronxcc.nki[.x]` to the old API's front end instead
(trnsim.nki.legacy, docs/legacy-nki.md); `nki[.x]` stays NKI 0.6.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

from trnsim.errors import ConfigError

_NAMESPACES = ("neuronxcc",)
# Published module names whose contents live in a trnsim module of another name: kernels import the
# ISA enums (`dge_mode`, `oob_mode`, `engine`, ...) from `nki.isa.constants`.
_RENAMED = {"isa.constants": "trnsim.nki.isa_constants"}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str | None):
        self.target = target

    def create_module(self, spec):
        if self.target is None:
            module = types.ModuleType(spec.name, "trnsim stand-in namespace for NKI aliases")
            module.__path__ = []
            return module
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:
        """The target module is already executed."""


# The old API's modules that are the 0.6 ones (the ISA enums).
_LEGACY_RENAMED = dict(_RENAMED)


def alias_target(fullname: str, legacy: bool = False) -> str | None:
    """The trnsim module an aliased name stands for: nki[.x] and neuronxcc.nki[.x] -> trnsim.nki[.x]
    (with `legacy`, neuronxcc.nki[.x] -> trnsim.nki.legacy[.x])."""
    for prefix in ("nki", "neuronxcc.nki"):
        if fullname == prefix or fullname.startswith(prefix + "."):
            rest = fullname[len(prefix) + 1:]
            if legacy and prefix == "neuronxcc.nki":
                return _LEGACY_RENAMED.get(rest, "trnsim.nki.legacy" + fullname[len(prefix):])
            return _RENAMED.get(rest, "trnsim.nki" + fullname[len(prefix):])
    return None


class AliasFinder(importlib.abc.MetaPathFinder):
    """Resolves the alias names, and only them, to trnsim modules (one module object per name)."""

    def __init__(self, legacy: bool = False):
        self.legacy = legacy

    def find_spec(self, fullname, path=None, target=None):
        if fullname in _NAMESPACES:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(None), is_package=True)
        target_name = alias_target(fullname, self.legacy)
        if target_name is None or importlib.util.find_spec(target_name) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name), is_package=True)


def _finder() -> AliasFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, AliasFinder)), None)


def _real_installation() -> str | None:
    """Where a real nki/neuronxcc would be imported from, if one exists."""
    for name in ("nki", "neuronxcc"):
        module = sys.modules.get(name)
        ours = module is not None and module.__name__.startswith("trnsim")
        if module is not None and not ours and getattr(module, "__file__", None) and name not in _NAMESPACES:
            return module.__file__
        if module is None:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin not in (None, "namespace"):  # a bare directory is no install
                return spec.origin
    return None


def enable(legacy: bool = False) -> None:
    """Install the aliases (idempotent). Raises ConfigError if a real nki/neuronxcc is importable.
    `legacy` maps neuronxcc.nki to the old API's front end (`enable_legacy`)."""
    finder = _finder()
    if finder is not None and finder.legacy == legacy:
        return
    if finder is not None:  # switching what neuronxcc.nki means: forget the modules it gave
        disable()
    real = _real_installation()
    if real is not None:
        raise ConfigError(f"a real NKI installation is importable ({real}); trnsim will not shadow it",
                          hint="use a virtual environment without it, or import trnsim.nki directly")
    sys.meta_path.insert(0, AliasFinder(legacy))


def enable_legacy() -> None:
    """`import neuronxcc.nki` gives the old API (trnsim.nki.legacy); `import nki` stays NKI 0.6."""
    enable(legacy=True)


def disable() -> None:
    """Remove the aliases and forget the alias modules."""
    finder = _finder()
    if finder is not None:
        sys.meta_path.remove(finder)
    for name in list(sys.modules):
        if name in _NAMESPACES or alias_target(name) is not None:
            del sys.modules[name]


def is_enabled() -> bool:
    return _finder() is not None


@contextlib.contextmanager
def enabled(legacy: bool = False):
    """The aliases inside the block only."""
    was_enabled = is_enabled()
    enable(legacy)
    try:
        yield
    finally:
        if not was_enabled:
            disable()
