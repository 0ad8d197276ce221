"""Compiles the scheduler's hot modules (`trnsim._native.MODULES`) with Cython, as an optional
speed-up: where Cython or a C compiler is missing, or a build fails, the install goes on and those
modules run as the Python they are, with the same results."""

import ast
import hashlib
import warnings
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent


def native_modules() -> tuple[str, ...]:
    """MODULES from src/trnsim/_native.py, read without importing trnsim (not installed yet)."""
    source = (ROOT / "src" / "trnsim" / "_native.py").read_text()
    start = source.index("MODULES = ")
    return ast.literal_eval(source[start + len("MODULES = "):source.index("\n", start)])


def source_of(module: str) -> str:
    return f"src/{module.replace('.', '/')}.py"


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        warnings.warn("Cython is not installed: trnsim's scheduler runs as Python", stacklevel=1)
        return []
    sources = [source_of(name) for name in native_modules()]
    return cythonize(sources, build_dir="build/cython", quiet=True,
                     # Type hints stay hints, as in Python: no C types, no checks at calls.
                     compiler_directives={"language_level": 3, "annotation_typing": False})


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing (the compiled modules are only faster), and stamps
    each module it compiled with its source's SHA-256: trnsim._native loads a compiled module only
    while its source still has that digest. A module that failed to build loses its stamp, so an
    older compiled copy of it is not loaded."""

    def run(self):
        self.built = set()
        try:
            super().run()
        except Exception as error:  # no compiler at all
            warnings.warn(f"trnsim's compiled modules were not built ({error}); they run as Python",
                          stacklevel=1)
        for ext in self.extensions:
            digest = hashlib.sha256((ROOT / source_of(ext.name)).read_bytes()).hexdigest()
            filename = self.get_ext_filename(ext.name)
            for compiled in (Path(self.build_lib) / filename, ROOT / "src" / filename):  # wheel, editable
                stamp = compiled.with_name(compiled.name + ".sha256")
                if ext.name in self.built and compiled.exists():
                    stamp.write_text(digest + "\n")
                else:
                    stamp.unlink(missing_ok=True)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:
            warnings.warn(f"{ext.name} was not compiled ({error}); it runs as Python", stacklevel=1)
        else:
            self.built.add(ext.name)

    def get_outputs(self):  # the stamps are installed with the compiled modules
        outputs = super().get_outputs()
        return outputs + [f"{path}.sha256" for path in outputs]


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
