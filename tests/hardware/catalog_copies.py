"""Helpers for tests that edit a copy of the hardware catalog and load it (imported by test modules
in this folder; the `data` fixture is in conftest.py)."""

from pathlib import Path

import pytest

from trnsim import SpecError, hardware


def corrupt(data: Path, file: str, old: str, new: str) -> None:
    """Replace the first `old` in the copy's `file` with `new`."""
    path = data / file
    text = path.read_text()
    assert text.count(old) >= 1, f"test setup: {old!r} not in {file}"
    path.write_text(text.replace(old, new, 1))


def load_error(data: Path) -> str:
    """The one-line SpecError loading the copy raises."""
    with pytest.raises(SpecError) as info:
        hardware.load(data)
    message = str(info.value)
    assert "\n" not in message
    return message
