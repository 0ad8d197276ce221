"""Fixtures the nki tests share."""

import pytest

from trnsim.core import deferred


@pytest.fixture
def on_workers(monkeypatch):
    """For each segment whose chains ran on worker threads: how many matmuls they held (so a test
    knows it compared something that ran in parallel)."""
    seen = []
    original = deferred._Chains.start

    def spy(entries, state):
        chains = original(entries, state)
        if chains is not None:
            seen.append(len(chains.lane_of))
        return chains
    monkeypatch.setattr(deferred._Chains, "start", staticmethod(spy))
    return seen
