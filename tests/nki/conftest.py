"""Fixtures the nki tests share."""

import threading

import pytest

from trnsim.core import deferred


@pytest.fixture
def on_workers(monkeypatch):
    """The GEMMs made on worker threads (so a test knows it compared something made there)."""
    made = []
    original = deferred.blas.run_queued

    def spy(calls):
        if threading.current_thread().name == "trnsim-gemm":
            made.extend(calls)
        original(calls)
    monkeypatch.setattr(deferred.blas, "run_queued", spy)
    return made
