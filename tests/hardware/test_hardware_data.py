"""Invariants of the shipped catalog: every number sourced, parts add up, disagreements kept."""

import re

import pytest

from trnsim import hardware
from trnsim.hardware.describe import rows

ALL_SPECS = [*hardware.cores(), *hardware.chips(), *hardware.instances()]
NEURON_INSTANCES = [i for i in hardware.instances() if i.chip is not None]


@pytest.mark.parametrize("spec", ALL_SPECS + [hardware.core("trn2").costs], ids=lambda s: s.name)
def test_every_number_has_a_source(spec):
    for row in rows(spec):
        numeric = isinstance(row.value, int | float) and not isinstance(row.value, bool)
        if numeric and not row.path.endswith(("generation", "partial", "announced")):
            assert row.sourced is not None, row.path


@pytest.mark.parametrize("instance", NEURON_INSTANCES, ids=lambda s: s.name)
def test_instance_totals_agree_with_their_chips(instance):
    chip, count = instance.chip, instance.accelerators
    assert instance.hbm_bytes == count * chip.hbm_bytes
    assert instance.hbm_bytes_per_s == pytest.approx(count * chip.hbm_bytes_per_s, rel=0.01)
    assert instance.peak_flops["bf16"] == pytest.approx(count * chip.peak_flops["bf16"], rel=0.01)
    assert instance.cores == count * chip.cores


@pytest.mark.parametrize("chip", [c for c in hardware.chips() if not c.announced], ids=lambda s: s.name)
def test_chip_peaks_sit_at_or_a_little_above_per_core_arithmetic(chip):
    """hw §0.2: vendor chip peaks run 3-6% above cores x per-core peak; never below."""
    per_cores = chip.cores * chip.core.peak_flops["bf16"]
    assert per_cores <= chip.peak_flops["bf16"] <= 1.07 * per_cores


def test_disagreements_are_kept_with_the_choice_visible():
    kept = [(spec.name, name) for spec in ALL_SPECS for name, s in spec.sources.items() if s.alternatives]
    assert len(kept) >= 12
    expected = {("Trainium2", "hbm_bytes_per_s"), ("Trainium3", "hbm_bytes_per_s"),
                ("Trainium2", "cc_cores"), ("Trainium3", "cc_cores"), ("Trainium", "peak_flops.bf16"),
                ("Trainium2", "peak_flops.bf16"), ("Trainium3", "peak_flops.bf16"),
                ("Trainium3", "link_bytes_per_s"), ("trn2.48xlarge", "peak_flops.bf16"),
                ("trn1.32xlarge", "topology"), ("trn1.2xlarge", "network_bytes_per_s"),
                ("p5.48xlarge", "hbm_bytes_per_s"), ("p5.48xlarge", "usd_per_hour"),
                ("p4d.24xlarge", "usd_per_hour"), ("Inferentia2", "hbm_bytes_per_s")}
    assert expected <= set(kept)
    trn2_hbm = hardware.source_of(hardware.chip("trn2"), "hbm_bytes_per_s")
    assert trn2_hbm.value == 2.9e12 and trn2_hbm.note.startswith("chosen")
    assert 3.0e12 in [alt.value for alt in trn2_hbm.alternatives]


def test_trainium4_is_announced_ratios_only():
    trn4 = hardware.chip("Trainium4")
    assert trn4.announced and trn4.relative_to is hardware.chip("trn3")
    assert dict(trn4.announced_ratios) == {"fp8_flops": 3, "fp4_flops": 6, "hbm_bytes_per_s": 4}
    assert trn4.core is None and trn4.cores is None and trn4.hbm_bytes is None
    assert not trn4.peak_flops and trn4.hbm_bytes_per_s is None
    assert all(i.chip is not trn4 for i in hardware.instances())


def test_every_price_has_a_date_and_gpu_instances_have_no_chip():
    for instance in hardware.instances():
        for field in ("usd_per_hour", "reserved_usd_per_hour"):
            if getattr(instance, field) is not None:
                assert re.match(r"\d{4}-\d{2}", instance.source_of(field).date)
    assert hardware.instance("p5.48xlarge").chip is None
    assert hardware.instance("p5.48xlarge").accelerator == "NVIDIA H100 SXM"


def test_the_required_systems_are_present():
    names = {i.name for i in hardware.instances()}
    assert {"inf1.xlarge", "inf1.24xlarge", "inf2.xlarge", "inf2.48xlarge", "trn1.2xlarge", "trn1.32xlarge",
            "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge", "Trn2 UltraServer",
            "Trn3 Gen1 UltraServer", "Trn3 Gen2 UltraServer", "p5.48xlarge", "p4d.24xlarge"} <= names
    assert hardware.instance("trn3-ultraserver-144").accelerators == 144
    assert hardware.instance("Trn2 UltraServer").accelerators == 64


def test_units_are_converted_as_written():
    trn1 = hardware.chip("trn1")
    assert trn1.hbm_bytes_per_s == 820 * 2**30 and trn1.source_of("hbm_bytes_per_s").written == "820 GiB/s"
    assert hardware.instance("trn2.48xlarge").network_bytes_per_s == 3200e9 / 8
    assert hardware.core("trn2").engines["vector"].clock_hz == 0.96e9
