"""Shared fixtures for the NKI front-end tests."""

import pytest


@pytest.fixture(params=["trn1", "trn2", "trn3"])
def target(request) -> str:
    """Every kernel test that takes `target` runs once per NeuronCore generation."""
    return request.param
