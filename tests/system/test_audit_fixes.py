"""Regression tests for the system-model audit: link units, launch instance, nccom plot and sizes,
argument errors, LNC, rank limits, permute across nodes, pictures and names."""

import dataclasses
import importlib.util
import pathlib
import shutil

import numpy as np
import pytest

import trnsim.nki as nki
import trnsim.nki.collectives as ncc
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl
from trnsim import hardware, system
from trnsim.cli import main
from trnsim.errors import ConfigError, SpecError
from trnsim.hardware import derived
from trnsim.system.collectives import time_on

MIB = 1 << 20
REPO = pathlib.Path(__file__).resolve().parents[2]


def per_chip_per_direction(name: str) -> float:
    fabric = system.fabric(name)
    return fabric.links_per_chip * fabric.link_bytes_per_s


def test_link_units_follow_the_sources():
    """[S7]: Trn3's 256 GB/s (4 PCIe links) and 320 GB/s are bidirectional per chip; trn2's 1,024 GB/s
    per chip is read the same way (both directions): per link and direction 32 and 128 GB/s."""
    assert system.fabric("trn3").link_bytes_per_s == 32e9
    assert per_chip_per_direction("Trn3 Gen1 UltraServer") == 256e9 / 2
    assert per_chip_per_direction("trn2.48xlarge") == 1024e9 / 2
    assert system.fabric("trn3").scaleup_bytes_per_s_per_chip == 320e9 / 2
    assert system.fabric("Trn2 UltraServer").scaleup_bytes_per_s_per_chip == 256e9 / 2
    alternatives = hardware.source_of(system.fabric("trn3"), "link_bytes_per_s").alternatives
    assert 64e9 in [alt.value for alt in alternatives]  # the per-direction reading is kept


def test_switch_group_drives_every_link_of_the_chip():
    fabric = system.fabric("trn3")
    group = system.topology.chip_group(fabric, tuple(range(16)), 4)
    assert group.degree == group.ring_links == fabric.links_per_chip


@pytest.mark.parametrize("ranks", [16, 64])
def test_trn3_against_trn2_follows_per_chip_bandwidth(ranks):
    """Large all-reduces are link bound: the trn3/trn2 busbw ratio is the ratio of the per-chip link
    bandwidth the group drives (trn2's torus: 2 links on a row of 4 chips, 4 on the full node)."""
    trn2 = system.collective_time("all_reduce", 1 << 30, ranks, "trn2.48xlarge")
    trn3 = system.collective_time("all_reduce", 1 << 30, ranks, "Trn3 Gen1 UltraServer")
    trn2_links = {16: 2, 64: 4}[ranks] * system.fabric("trn2").link_bytes_per_s
    assert trn3.busbw / trn2.busbw == pytest.approx(per_chip_per_direction("trn3") / trn2_links, rel=0.1)


def test_trn3_with_more_per_chip_bandwidth_is_not_slower_than_trn2():
    """If Trn3's chip had trn2's per-chip link bandwidth or more (the other readings of its docs),
    its all-reduce would not be slower than trn2's at equal ranks."""
    fabric = system.fabric("trn3")
    wider = dataclasses.replace(fabric, link_bytes_per_s=system.fabric("trn2").link_bytes_per_s)
    for ranks in (8, 16, 64):
        trn3 = time_on(system.Machine(wider, 2), "all_reduce", 1 << 30, ranks)
        trn2 = system.collective_time("all_reduce", 1 << 30, ranks, "trn2.48xlarge")
        assert trn3.seconds <= trn2.seconds * 1.001


@nki.jit
def _all_reduce_kernel(input, group):
    src = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="src")
    nisa.dma_copy(dst=src, src=input)
    dst = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm, name="dst")
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)
    out = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


def test_launch_times_collectives_on_its_instance():
    ranks, x = 128, np.ones((128, 2048), np.float32)
    group = ncc.ReplicaGroup([list(range(ranks))])
    default = system.launch(_all_reduce_kernel, ranks, lambda r: (x, group), target="trn2")
    ultra = system.launch(_all_reduce_kernel, ranks, lambda r: (x, group), target="trn2",
                          instance="Trn2 UltraServer")
    expected = (system.collective_time("all_reduce", x.nbytes, ranks, "trn2.48xlarge", "uint8").seconds
                - system.collective_time("all_reduce", x.nbytes, ranks, "Trn2 UltraServer", "uint8").seconds)
    saved = default.timeline().latency_s - ultra.timeline().latency_s
    assert expected > 0 and saved == pytest.approx(expected, rel=0.02)


def test_nccom_plot_draws_the_table(monkeypatch, tmp_path, capsys):
    import trnsim.system.pictures as pictures

    drawn = {}
    monkeypatch.setattr(pictures, "busbw_plot",
                        lambda series, title, path: drawn.update(series=series, title=title))
    main(["nccom", "allr", "-r", "16", "-N", "2", "--lnc", "1", "-b", "1M", "-e", "1M", "--algorithm", "ring",
          "--json", "--plot", str(tmp_path / "p.png")])
    import json

    row = json.loads(capsys.readouterr().out)["results"][0]
    assert drawn["series"] == {"16 ranks": [(MIB, row["busbw(GB/s)"])]}
    assert "-N 2" in drawn["title"] and "LNC=1" in drawn["title"] and "ring" in drawn["title"]


def test_nccom_plot_ranks_with_replica_groups_refused(tmp_path, capsys):
    groups = tmp_path / "g.json"
    groups.write_text("[[0, 1, 2, 3]]")
    code = main(["nccom", "allr", "-r", "4", "--custom-replica-groups", str(groups), "--plot",
                 str(tmp_path / "p.png"), "--plot-ranks", "4,8"])
    assert code == 2 and "--plot-ranks with --custom-replica-groups" in capsys.readouterr().err


def test_nccom_small_sizes_are_whole_elements_printed_once(capsys):
    assert main(["nccom", "allr", "-r", "16", "-b", "1", "-e", "16", "-f", "2", "-d", "fp32"]) == 0
    out = capsys.readouterr().out
    sizes = [int(line.split()[0]) for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert sizes == [4, 8, 16] and "printed once" in out


@pytest.mark.parametrize("instance", ["trn1.32xlarge", "inf2.48xlarge"])
def test_lnc2_refused_where_the_core_has_none(instance):
    with pytest.raises(ConfigError, match="LNC=2 does not exist"):
        system.Machine.of(instance, lnc=2)
    with pytest.raises(ConfigError, match="LNC=2 does not exist"):
        system.collective_time("all_reduce", MIB, 16, instance, lnc=2)


def test_lnc_must_be_a_plain_int():
    with pytest.raises(ConfigError, match="LNC must be 1 or 2"):
        system.Machine.of("trn2", lnc=True)


def test_huge_rank_counts_refused(capsys):
    with pytest.raises(ConfigError, match="more than trnsim models"):
        system.collective_time("all_reduce", MIB, 10**9)
    assert main(["nccom", "allr", "-r", "1000000000", "-b", "1M", "-e", "1M"]) == 2
    assert "more than trnsim models" in capsys.readouterr().err


@pytest.mark.parametrize("call, match", [
    (lambda: system.collective_time("all_reduce", 1024, 4, dtype=["bf16"]), "dtype must be"),
    (lambda: system.Machine.of("trn2").span([]), "at least one rank"),
    (lambda: system.Machine.of("trn2").place(1.5), "rank must be a whole number"),
    (lambda: system.Machine.of("trn2").place("3"), "rank must be a whole number"),
    (lambda: system.collective_time("all_reduce", 1024, 2, group=[True, 0]), "group must list"),
    (lambda: system.collective_time("all_reduce", 1024, 2, group=[0, 64], nodes=2), "both place the ranks"),
])
def test_bad_arguments_raise_config_errors(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


def test_figures_of_a_fabric_is_a_spec_error():
    with pytest.raises(SpecError, match="chip or an instance"):
        derived.figures(system.fabric("trn2"))


def test_permute_across_nodes_uses_one_nic():
    """One rank's buffer crossing to the next node goes over one chip's EFA NIC, whatever the group."""
    fabric = system.fabric("trn2.48xlarge")
    nic = fabric.network_bytes_per_s_per_node / fabric.chips_per_node
    ring = system.collective_time("permute", 1 << 30, 128)
    pair = system.collective_time("permute", 1 << 30, 2, nodes=2)
    assert ring.seconds == pytest.approx(pair.seconds)
    assert ring.busbw * 1e9 <= nic


def test_topology_picture_labels(tmp_path, monkeypatch):
    import matplotlib.axes

    titles = []
    original = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title",
                        lambda self, text, *a, **k: titles.append(text) or original(self, text, *a, **k))
    from trnsim.system.pictures import topology_picture

    topology_picture("Trn3 Gen1 UltraServer", tmp_path / "t3.png")
    topology_picture("inf2.48xlarge", tmp_path / "i2.png")
    assert "4 x 32 GB/s per link and direction (128 GB/s per chip)" in titles[0]
    assert "51.5 GB/s" in titles[1] and "51.5396" not in titles[1]


def test_topology_picture_of_an_edited_catalog(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(REPO / "src" / "trnsim" / "hardware" / "data", data)
    path = data / "fabrics.toml"
    old = 'link_bytes_per_s = { value = 128, unit = "GB/s", source = "[S5] derived: 1,024'
    path.write_text(path.read_text().replace(old, old.replace("128", "100"), 1))
    import trnsim.system.pictures as pictures

    seen = []
    original = pictures.topology_picture
    monkeypatch.setattr(pictures, "topology_picture", lambda spec, p: seen.append(spec) or original(spec, p))
    assert main(["specs", "--topology", "trn2.48xlarge", "--data", str(data), "--picture",
                 str(tmp_path / "t.png")]) == 0
    assert seen[0].link_bytes_per_s == 100e9


def test_fabric_table_says_na_where_a_field_does_not_apply(capsys):
    assert main(["specs", "fabrics"]) == 0
    out = capsys.readouterr().out
    assert "not published" not in out and "n/a: does not apply" in out and "Per link, 1 direction" in out


def test_names_are_unambiguous():
    assert [spec.name for spec in hardware.find("trn2u")] == ["trn2u.48xlarge"]
    with pytest.raises(SpecError):
        system.fabric("trn2u")  # the UltraServer's fabric is "Trn2 UltraServer", not its node
    assert hardware.instance("Trn3 Gen1 UltraServer").logical_cores == 256
    assert hardware.instance("Trn3 Gen2 UltraServer").logical_cores == 576


def _bench():
    spec = importlib.util.spec_from_file_location("bench_collectives", REPO / "bench" / "collectives.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_holds_rows_out_of_the_fit():
    bench = _bench()
    if not bench.DEFAULT_CSV.exists():
        pytest.skip("the calibration table is not beside this checkout")
    rows = bench.read_table(bench.DEFAULT_CSV)
    fitting, held = bench.split(rows)
    assert len(fitting) + len(held) == len(rows) and fitting and held
    assert all(row["size"] < 128 * MIB and row["size"] not in (1 << 15, 1 << 19, 1 << 23) for row in fitting)
    fabric = system.fabric("trn2.48xlarge")
    result = bench.report(rows, system.Machine(fabric, fabric.default_lnc))
    assert result["fitting"]["rows"] == len(fitting) and result["held_out"]["rows"] == len(held)
    assert result["held_out"]["mape_pct"] < 10


def test_bench_finds_the_table_from_its_own_path():
    bench = _bench()
    assert all(str(path).startswith(str(REPO.parent)) for path in bench.CANDIDATES)
