"""Fixtures the hardware tests share."""

import shutil
from pathlib import Path

import pytest

from trnsim.hardware.catalog import DATA_DIR


@pytest.fixture
def data(tmp_path) -> Path:
    """A copy of the catalog's data files to edit."""
    copy = tmp_path / "data"
    shutil.copytree(DATA_DIR, copy)
    return copy
