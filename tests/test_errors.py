"""The error family: documented, typed like the built-ins, and naming the user's line."""

import pathlib

import pytest

import trnsim
from trnsim.errors import ALL_ERRORS, KernelError, ShapeError, SourceLoc

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
