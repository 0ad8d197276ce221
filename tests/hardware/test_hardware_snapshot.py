"""The built catalog kept in the cache directory: read back whole, never stale, and never in the
way (a broken or unwritable cache only costs the 25 ms rebuild)."""

import dataclasses
import os
import threading
from pathlib import Path

import pytest
from catalog_copies import corrupt

from trnsim.hardware import snapshot
from trnsim.hardware.catalog import DATA_DIR, load_catalog


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "trnsim"


def _refuse():
    raise AssertionError("rebuilt although a snapshot was there")


def _same(a, b, path="catalog"):
    """Field-by-field equality (specs compare by identity, and a snapshot holds new objects)."""
    if dataclasses.is_dataclass(a):
        assert type(a) is type(b), path
        for field in dataclasses.fields(a):
            _same(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
    elif hasattr(a, "items"):
        assert type(a) is type(b) and list(a) == list(b), path
        for key in a:
            _same(a[key], b[key], f"{path}[{key}]")
    elif isinstance(a, tuple | list):
        assert len(a) == len(b), path
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{index}]")
    else:
        assert a == b, path


def test_a_snapshot_is_the_catalog_it_was_made_from(cache):
    built = snapshot.cached(DATA_DIR, load_catalog)
    [saved] = cache.glob("catalog-*.pickle")
    read = snapshot.cached(DATA_DIR, _refuse)
    assert read is not built
    _same(read, built)
    assert read.core("trn2").engines["tensor"].clock_hz == built.core("trn2").engines["tensor"].clock_hz
    assert [path.name for path in cache.iterdir()] == [saved.name]  # no temporary file left


def test_changed_data_is_built_again(cache, data):
    snapshot.cached(data, lambda: load_catalog(data))
    corrupt(data, "cores.toml", "aliases = [", "aliases = [\"changed-core\", ")
    second = snapshot.cached(data, lambda: load_catalog(data))
    assert second.core("changed-core").name == "NeuronCore-v1"
    assert len(list(cache.glob("catalog-*.pickle"))) == 2  # the other version's, unused for a week, goes


def test_old_snapshots_of_other_versions_are_dropped(cache, data):
    snapshot.cached(data, lambda: load_catalog(data))
    [old] = cache.glob("catalog-*.pickle")
    os.utime(old, (0, 0))
    snapshot.cached(DATA_DIR, load_catalog)
    assert old not in list(cache.glob("catalog-*.pickle"))
    assert len(list(cache.glob("catalog-*.pickle"))) == 1


def test_a_snapshot_others_may_write_is_not_read(cache):
    snapshot.cached(DATA_DIR, load_catalog)
    [saved] = cache.glob("catalog-*.pickle")
    saved.chmod(0o666)
    rebuilt = snapshot.cached(DATA_DIR, load_catalog)  # rebuilt, and saved as this user's again
    _same(rebuilt, load_catalog())
    assert not saved.stat().st_mode & 0o022


def test_a_truncated_snapshot_is_rebuilt(cache):
    snapshot.cached(DATA_DIR, load_catalog)
    [saved] = cache.glob("catalog-*.pickle")
    saved.write_bytes(saved.read_bytes()[:1000])
    rebuilt = snapshot.cached(DATA_DIR, load_catalog)
    _same(rebuilt, load_catalog())
    _same(snapshot.cached(DATA_DIR, _refuse), rebuilt)  # and saved whole again


def test_an_unwritable_cache_directory_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    catalog = snapshot.cached(DATA_DIR, load_catalog)
    assert catalog.core("trn2").name == "NeuronCore-v3"
    assert blocker.read_text() == ""


def test_no_home_directory_still_gives_the_catalog(monkeypatch):
    """Containers run as a user with no home and no XDG_CACHE_HOME: Path.home() raises there."""
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def homeless():
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(Path, "home", homeless)
    assert snapshot.cached(DATA_DIR, load_catalog).core("trn2").name == "NeuronCore-v3"


def test_a_catalog_that_cannot_be_pickled_is_returned_and_leaves_no_file(cache):
    built = {"lock": threading.Lock()}
    assert snapshot.cached(DATA_DIR, lambda: built) is built
    assert not cache.exists() or list(cache.iterdir()) == []


def test_a_snapshot_in_use_is_kept(cache, data):
    """'A week unused': reading a snapshot renews it, so another version's cleanup leaves it."""
    snapshot.cached(data, lambda: load_catalog(data))
    [used] = cache.glob("catalog-*.pickle")
    os.utime(used, (0, 0))
    snapshot.cached(data, _refuse)  # read, and so renewed
    snapshot.cached(DATA_DIR, load_catalog)
    assert used.exists()
