"""The error family: documented, typed like the built-ins, and naming the user's line."""

import pathlib
import re

import numpy as np
import pytest

import trnsim
import trnsim.hardware
import trnsim.nki as nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
import trnsim.numerics
from trnsim.errors import ALL_ERRORS, KernelError, ShapeError, SourceLoc, TrnsimError

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "errors.md"


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_every_error_class_is_documented_and_exported(cls):
    assert f"## {cls.anchor}\n" in DOCS.read_text()
    assert cls.__doc__ and len(cls.__doc__.strip()) > 20
    assert getattr(trnsim, cls.__name__) is cls


def test_kernel_error_names_the_callers_file_and_line():
    line = None

    def kernel():
        nonlocal line
        line = kernel.__code__.co_firstlineno + 3
        raise ShapeError("partition dimension 256 exceeds 128", op="nisa.memset", hint="split the tile")

    with pytest.raises(ValueError) as info:
        kernel()
    error = info.value
    assert isinstance(error, KernelError)
    assert error.where == SourceLoc(__file__, line, "kernel")
    assert str(error) == (f"test_errors.py:{line} in kernel: nisa.memset: "
                          "partition dimension 256 exceeds 128 — split the tile")


def test_config_override_is_scoped_and_rejects_unknown_names(monkeypatch):
    from trnsim import config

    monkeypatch.setenv("TRNSIM_STRICT", "0")
    assert config.current().strict is False
    with config.override(strict=True):
        assert config.current().strict is True
    assert config.current().strict is False
    with pytest.raises(trnsim.ConfigError, match="unknown setting"):
        with config.override(stric=True):
            pass
    monkeypatch.setenv("TRNSIM_STRICT", "maybe")
    with pytest.raises(trnsim.ConfigError, match="TRNSIM_STRICT"):
        config.current()


def _examples():
    """(anchor, code, message) for each example in docs/errors.md."""
    sections = DOCS.read_text().split("\n## ")[1:]
    for section in sections:
        anchor = section.split("\n", 1)[0]
        found = re.search(r"```python\n(.*?)```\n```text\n(.*?)\n```", section, re.S)
        if found:
            yield anchor, found.group(1), found.group(2)


@pytest.mark.parametrize("cls", [c for c in ALL_ERRORS if c is not TrnsimError], ids=lambda c: c.__name__)
def test_every_error_class_has_an_example_that_raises_its_message(cls):
    examples = {anchor: (code, message) for anchor, code, message in _examples()}
    code, message = examples[cls.anchor]
    scope = {"np": np, "trnsim": trnsim, "nki": nki, "nisa": nisa, "nl": nl,
             "x": np.ones((128, 512), np.float32)}
    with pytest.raises(cls) as caught:
        exec(compile(code, "kernel.py", "exec"), scope)
    assert type(caught.value) is cls
    assert str(caught.value) == message
