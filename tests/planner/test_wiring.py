"""The planner's times are trnsim.cost's and trnsim.system's (no stand-in here)."""

import pytest

from trnsim import cost, system
from trnsim.planner import machine, optime
from trnsim.planner.ops import Op


def test_an_op_costs_what_the_cost_library_says_split_over_the_logical_core():
    trn2 = machine("trn2.48xlarge")
    assert trn2.lnc == 2 and trn2.ranks == 64
    expected = cost.matmul(512, 1024, 1024, dtype="bfloat16", target="trn2", tier="fast").seconds / 2
    assert optime.op_seconds(trn2, Op("matmul", (512, 1024, 1024), 3), "bf16") == pytest.approx(3 * expected)


def test_a_collective_inside_a_node_is_the_system_models():
    trn1 = machine("trn1.32xlarge")
    expected = system.collective_time("all_reduce", 1 << 20, 16, instance="trn1.32xlarge").seconds
    assert optime.collective_seconds(trn1, "all_reduce", 1 << 20, 16, 1) == pytest.approx(expected)


def test_a_group_across_nodes_carries_its_nodes_data():
    trn1 = machine("trn1.32xlarge")
    expected = system.collective_time("all_reduce", 32 << 20, 4 * 32, instance="trn1.32xlarge").seconds
    assert optime.collective_seconds(trn1, "all_reduce", 1 << 20, 4, 32) == pytest.approx(expected)


def test_op_costs_are_remembered_on_disk_per_source_version(tmp_path, monkeypatch):
    from trnsim.planner import opcache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    stale = tmp_path / "trnsim" / "planner-opcosts-0000.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    opcache._table.cache_clear()
    try:
        opcache.remember("key", 1.5)
        opcache._table.cache_clear()
        assert opcache.lookup("key") == 1.5
        assert not stale.exists() and opcache._path().exists()
    finally:
        opcache._table.cache_clear()


def test_op_costs_without_a_home_directory_are_not_remembered(monkeypatch):
    """Containers run as a user with no home and no XDG_CACHE_HOME: Path.home() raises there, and
    that reached the user from the planner."""
    from pathlib import Path

    from trnsim.planner import opcache

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def homeless():
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(Path, "home", homeless)
    opcache._table.cache_clear()
    try:
        opcache.remember("key", 1.5)
        assert opcache.lookup("key") == 1.5  # kept for this process only
    finally:
        opcache._table.cache_clear()
