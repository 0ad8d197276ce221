"""Compiles the scheduler's hot modules (`trnsim._native.MODULES`) with Cython, as an optional
speed-up: where Cython or a C compiler is missing, or a build fails, the install goes on and those
modules run as the Python they are, with the same results."""

import ast
import warnings
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext


def native_modules() -> tuple[str, ...]:
    """MODULES from src/trnsim/_native.py, read without importing trnsim (not installed yet)."""
    path = Path(__file__).parent / "src" / "trnsim" / "_native.py"
    source = path.read_text()
    start = source.index("MODULES = ")
    return ast.literal_eval(source[start + len("MODULES = "):source.index("\n", start)])


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        warnings.warn("Cython is not installed: trnsim's scheduler runs as Python", stacklevel=1)
        return []
    sources = [f"src/{name.replace('.', '/')}.py" for name in native_modules()]
    return cythonize(sources, build_dir="build/cython", quiet=True,
                     # Type hints stay hints, as in Python: no C types, no checks at calls.
                     compiler_directives={"language_level": 3, "annotation_typing": False})


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the compiled modules are only faster."""

    def run(self):
        try:
            super().run()
        except Exception as error:  # no compiler at all
            warnings.warn(f"trnsim's compiled modules were not built ({error}); they run as Python",
                          stacklevel=1)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:
            warnings.warn(f"{ext.name} was not compiled ({error}); it runs as Python", stacklevel=1)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
