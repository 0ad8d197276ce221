"""system.collective_time: the agreed interface, the calibration, the documented algorithm choice,
and properties each machine's topology must give."""

import math
import pathlib
import sys

import pytest

from trnsim import system
from trnsim.errors import ConfigError, SpecError, UnsupportedError

MIB = 1 << 20
BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def test_interface_fields_and_nccom_bus_factors():
    t = system.collective_time("all_reduce", 32 * MIB, 16, instance="trn2.48xlarge", dtype="bfloat16")
    assert t.seconds > 0 and t.algorithm in ("mesh", "mesh1", "ring", "kangaring", "rdh")
    assert math.isclose(t.algbw, 32 * MIB / t.seconds / 1e9)
    assert math.isclose(t.busbw, t.algbw * 2 * 15 / 16)
    gather = system.collective_time("allg", 32 * MIB, 16)
    assert math.isclose(gather.busbw, gather.algbw * 15 / 16)
    permute = system.collective_time("permute", 32 * MIB, 16)
    assert math.isclose(permute.busbw, permute.algbw)
    pair = system.collective_time("sendrecv", 32 * MIB, 2, nodes=2)  # one chip's 200 Gbps NIC each way
    assert pair.busbw * 1e9 <= system.fabric("trn2").network_bytes_per_s_per_node / 16


def test_one_rank_or_no_bytes_take_no_time():
    assert system.collective_time("all_reduce", 4096, 1).seconds == 0.0
    assert system.collective_time("all_gather", 0, 16).seconds == 0.0


@pytest.mark.parametrize("size, expected", [(64 << 10, {"mesh", "mesh1"}), (8 * MIB, {"rdh"}),
                                            (512 * MIB, {"kangaring"})])
def test_size_based_choice_as_documented(size, expected):
    """Mesh below 1 MB, RDH for 1-56 MB, KangaRing above ([S16])."""
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert system.collective_time(op, size, 64).algorithm in expected


def test_without_rdh_kangaring_takes_its_sizes_and_mesh_runs_only_where_faster():
    """inf2's 12 chips cannot run RDH: KangaRing takes RDH's sizes, and below the mesh limit mesh
    runs only where it beats KangaRing (small buffers), never a slower mesh on the long ring."""
    def time(size, algorithm=None):
        return system.collective_time("all_reduce", size, 24, instance="inf2.48xlarge", algorithm=algorithm)
    assert time(2 * MIB).algorithm == "kangaring"
    assert time(2 * MIB).seconds == time(2 * MIB, "kangaring").seconds
    assert time(16 << 10).algorithm in {"mesh", "mesh1"}
    for size in (16 << 10, 512 << 10, 2 * MIB):
        assert time(size).seconds <= min(time(size, "mesh").seconds, time(size, "kangaring").seconds)


def test_time_grows_with_size_and_hierarchy_across_nodes():
    sizes = [2**k for k in range(13, 31)]
    for instance, ranks in (("trn2.48xlarge", 16), ("trn2.48xlarge", 128), ("trn1.32xlarge", 32),
                            ("Trn2 UltraServer", 256), ("Trn3 Gen2 UltraServer", 144 * 4),
                            ("inf2.48xlarge", 24), ("trn2.48xlarge", 12), ("trn2.48xlarge", 4)):
        times = [system.collective_time("all_reduce", s, ranks, instance=instance).seconds for s in sizes]
        assert all(a <= b for a, b in zip(times, times[1:], strict=False)), instance
    two_nodes = system.collective_time("all_reduce", MIB, 128)
    assert two_nodes.algorithm == "hier" and [s.tier for s in two_nodes.stages] == ["node", "efa", "node"]
    assert two_nodes.seconds > system.collective_time("all_reduce", MIB, 64).seconds


def test_ultraserver_links_beat_efa_between_nodes():
    """Four trn2 nodes joined by the UltraServer's Z-rings beat four trn2.48xlarge over EFA."""
    for size in (64 << 10, 256 * MIB):
        ultra = system.collective_time("all_reduce", size, 256, instance="Trn2 UltraServer")
        efa = system.collective_time("all_reduce", size, 256, instance="trn2.48xlarge")
        assert ultra.seconds < efa.seconds
        assert [s.tier for s in ultra.stages] == ["node", "scale-up", "node"]


@pytest.mark.parametrize("instance", ["trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "Trn2 UltraServer",
                                      "Trn3 Gen1 UltraServer", "Trn3 Gen2 UltraServer"])
def test_busbw_bounded_by_the_chip_links(instance):
    """Inside a node a chip's traffic leaves on its links: busbw <= links x rate x (N-1)/N x C/(C-1)."""
    fabric = system.fabric(instance)
    machine = system.Machine.of(instance)
    for chips in (2, 4, fabric.chips_per_node):
        ranks = chips * machine.ranks_per_chip
        bound = fabric.links_per_chip * fabric.link_bytes_per_s * (ranks - 1) / ranks * chips / (chips - 1)
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            assert system.collective_time(op, 1 << 30, ranks, instance=instance).busbw * 1e9 <= bound


def test_generations_retarget():
    """The same collective is slower on trn1's NeuronLink-v2 than on trn2's NeuronLink-v3."""
    trn1 = system.collective_time("all_reduce", 256 * MIB, 32, instance="trn1.32xlarge")
    trn2 = system.collective_time("all_reduce", 256 * MIB, 64, instance="trn2.48xlarge")
    assert trn1.busbw < trn2.busbw


def test_forced_algorithm_and_its_refusals():
    assert system.collective_time("all_reduce", MIB, 16, algorithm="ring").algorithm == "ring"
    with pytest.raises(UnsupportedError, match="rdh does not run"):
        system.collective_time("all_reduce", MIB, 12, algorithm="rdh")  # 3 chips: not a power of two
    with pytest.raises(UnsupportedError, match="nothing spans nodes"):
        system.collective_time("all_reduce", MIB, 16, algorithm="hier")
    with pytest.raises(ConfigError, match="unknown collective algorithm"):
        system.collective_time("all_reduce", MIB, 16, algorithm="tree")


@pytest.mark.parametrize("call, error, text", [
    (lambda: system.collective_time("broadcast", 1024, 16), ConfigError, "unknown collective"),
    (lambda: system.collective_time("all_reduce", -1, 16), ConfigError, "size_bytes"),
    (lambda: system.collective_time("all_reduce", 1023, 16, dtype="bf16"), ConfigError, "whole number"),
    (lambda: system.collective_time("all_reduce", 1024, 0), ConfigError, "ranks"),
    (lambda: system.collective_time("all_reduce", 1024, 4, group=[0, 1, 1, 2]), ConfigError, "twice"),
    (lambda: system.collective_time("all_reduce", 1024, 6, nodes=4), ConfigError, "evenly"),
    (lambda: system.collective_time("all_reduce", 1024, 16, instance="trn9"), SpecError, "no chip network"),
    (lambda: system.collective_time("all_reduce", 1024, 16, dtype="complex64"), ConfigError, "dtype"),
])
def test_bad_arguments_raise_trnsim_errors(call, error, text):
    with pytest.raises(error, match=text):
        call()


def test_ranks_are_logical_cores_as_neuron_numbers_them():
    trn2 = system.Machine.of("trn2.48xlarge")
    assert (trn2.ranks_per_chip, trn2.ranks_per_node) == (4, 64)
    place = trn2.place(5)
    assert (place.chip, place.core, place.physical_cores) == (1, 1, (2, 3))
    assert system.Machine.of("trn2.48xlarge", lnc=1).place(5).physical_cores == (5,)
    assert system.Machine.of("trn1.32xlarge").ranks_per_node == 32
    ultra = system.Machine.of("Trn2 UltraServer", ranks=512)
    assert (ultra.systems, ultra.place(300).system, ultra.place(300).node) == (2, 1, 0)
    with pytest.raises(ConfigError, match="LNC"):
        system.Machine.of("trn2.48xlarge", lnc=3)


def test_calibration_table_error():
    """The 16-rank trn2 table (bench/collectives.py): MAPE under 15% on the fitting rows and on the
    held-out rows apart."""
    sys.path.insert(0, str(BENCH))
    try:
        import collectives as bench
    finally:
        sys.path.remove(str(BENCH))
    if not bench.DEFAULT_CSV.exists():
        pytest.skip("calibration table not present (../shared/reference)")
    fabric = system.fabric("trn2.48xlarge")
    result = bench.report(bench.read_table(bench.DEFAULT_CSV), system.Machine(fabric, fabric.default_lnc))
    fitting, held = result["fitting"], result["held_out"]
    assert fitting["rows"] + held["rows"] == 54
    assert fitting["mape_pct"] < 15 and held["mape_pct"] < 15 and held["mape_pct_ge_1MiB"] < 20


def test_replica_groups_and_nodes():
    """One rank per chip runs ring, never KangaRing ([S16]); -N spreads ranks over nodes."""
    one_per_chip = system.collective_time("all_reduce", 512 * MIB, 16, group=list(range(0, 64, 4)))
    assert one_per_chip.algorithm == "ring"
    assert system.collective_time("all_reduce", 512 * MIB, 16).algorithm == "kangaring"
    pair = system.collective_time("all_reduce", MIB, 2, nodes=2)
    assert [s.tier for s in pair.stages] == ["efa"] and pair.seconds > system.fabric("trn2").network_latency_s
    far = system.collective_time("all_gather", 64 * MIB, 8, group=[0, 1, 2, 3, 8, 9, 10, 11])  # chips 0, 2
    near = system.collective_time("all_gather", 64 * MIB, 8)  # chips 0, 1: neighbours
    assert far.seconds > near.seconds


def test_hierarchical_beats_a_flat_ring_across_nodes_at_small_sizes():
    """[S17]: hierarchical is the default; a flat ring pays an EFA hop on each of its 2(N-1) steps."""
    for instance, ranks in (("trn2.48xlarge", 128), ("trn1.32xlarge", 64), ("Trn2 UltraServer", 512)):
        hier = system.collective_time("all_reduce", 64 << 10, ranks, instance=instance)
        flat = system.collective_time("all_reduce", 64 << 10, ranks, instance=instance, algorithm="flat")
        assert hier.algorithm == "hier" and hier.seconds < flat.seconds / 10
    large = system.collective_time("all_gather", 1 << 30, 128, algorithm="flat")
    efa = system.fabric("trn2.48xlarge").network_bytes_per_s_per_node
    assert large.busbw * 1e9 <= efa
    with pytest.raises(UnsupportedError, match="nothing spans nodes"):
        system.collective_time("all_reduce", MIB, 64, algorithm="flat")


def test_trn3_switch_reaches_every_chip_in_one_hop():
    """NeuronSwitch: a mesh step costs the same whatever the chip count, unlike the trn2 torus."""
    small = [system.collective_time("all_gather", 8192, n, instance="Trn3 Gen1 UltraServer").seconds
             for n in (8, 64)]
    torus = [system.collective_time("all_gather", 8192, n, instance="trn2.48xlarge").seconds for n in (8, 64)]
    assert small[0] == pytest.approx(small[1], rel=0.05) and torus[1] > torus[0] * 1.1
    gen2 = system.collective_time("all_reduce", 256 * MIB, 32, instance="Trn3 Gen2 UltraServer")
    assert [s.tier for s in gen2.stages] == ["node", "scale-up", "node"]  # 4 chips (16 ranks) a server


def test_uneven_groups_are_timed_as_their_fullest_node():
    """96 ranks on trn2.48xlarge: 64 on node 0, 32 on node 1; timed as two full nodes' worth."""
    uneven = system.collective_time("all_reduce", 64 * MIB, 96)
    full = system.collective_time("all_reduce", 64 * MIB, 128)
    assert uneven.algorithm == "hier" and uneven.seconds == pytest.approx(full.seconds, rel=0.05)
    assert system.Machine.of("trn2.48xlarge", ranks=96).span(range(96)).even is False
