"""Fixtures the nki tests share."""

import pytest

from trnsim.core import deferred


@pytest.fixture
def on_workers(monkeypatch):
    """For each segment whose chains ran on worker threads: how many matmuls they held (so a test
    knows it compared something that ran in parallel)."""
    seen = []
    original = deferred.DeferredQueue._run_chains

    def spy(self, entries):
        done = original(self, entries)
        if done:
            seen.append(len(done))
        return done
    monkeypatch.setattr(deferred.DeferredQueue, "_run_chains", spy)
    return seen
