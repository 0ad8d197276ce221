"""Loading published NKI kernels from a local copy of their repositories (imported by the tests).

The kernels are not in this repository. TRNSIM_PUBLISHED_KERNELS names a directory with one
folder per repository (aws-neuron-sdk, nki-samples, nki-library, nki-moe), each an export of the
commit listed in test_published_kernels.py; without it the tests are skipped.
"""

import importlib
import importlib.util
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

ENV_VAR = "TRNSIM_PUBLISHED_KERNELS"
NKILIB_ROOT = "nki-library/src/nkilib_src"  # the folder holding the `nkilib` package


def published_root() -> Path | None:
    """The directory of repository exports, or None when it is not configured or absent."""
    value = os.environ.get(ENV_VAR)
    return Path(value) if value and Path(value).is_dir() else None


class KernelSources:
    """Imports published kernel modules unmodified, with `import nki` meaning trnsim.nki."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[str, object] = {}

    def load(self, repo: str, path: str):
        """The module at `repo/path`; nki-library files are imported as `nkilib.*` (relative imports)."""
        key = f"{repo}/{path}"
        if key not in self.modules:
            environment = dict(os.environ)
            try:
                self.modules[key] = self._import(repo, path)
            finally:  # a tutorial that sets NEURON_PLATFORM_TARGET_OVERRIDE must not steer the others
                os.environ.clear()
                os.environ.update(environment)
        return self.modules[key]

    def load_code_block(self, repo: str, path: str, marker: str, folder: Path, edit=lambda code: code):
        """The last ``.. code-block:: python`` of an .rst page that contains `marker`, saved in `folder`
        (after `edit`) and imported: tutorials whose kernels live only in their pages."""
        page = self.root / repo / path
        if not page.is_file():
            pytest.skip(f"{page} is not in the published kernel directory")
        blocks = re.findall(r"\.\. code-block:: python\n(?:[ \t]+:[^\n]*\n)*\n((?:(?:[ \t]+[^\n]*)?\n)+)",
                            page.read_text())
        code = textwrap.dedent([block for block in blocks if marker in block][-1])
        file = folder / f"{page.stem.replace('-', '_')}.py"
        file.write_text(edit(code))
        spec = importlib.util.spec_from_file_location(f"published_{file.stem}", file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def _import(self, repo: str, path: str):
        file = self.root / repo / path
        if not file.is_file():
            pytest.skip(f"{file} is not in the published kernel directory")
        package_root = self.root / NKILIB_ROOT
        if file.is_relative_to(package_root):
            name = ".".join(file.relative_to(package_root).with_suffix("").parts)
            return importlib.import_module(name)
        before = set(sys.modules)
        sys.path.insert(0, str(file.parent))  # tutorials import their sibling helper modules by name
        try:
            name = f"published_{repo}_{file.stem}".replace("-", "_")
            spec = importlib.util.spec_from_file_location(name, file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:  # two repositories ship helpers of the same name (mx_kernel_utils): forget the siblings
            sys.path.remove(str(file.parent))
            for name in set(sys.modules) - before:
                if str(getattr(sys.modules[name], "__file__", "")).startswith(str(file.parent)):
                    del sys.modules[name]
        return module
