"""Derived comparison figures against hand arithmetic on the published numbers (hw §1.5, §5)."""

import pytest

from trnsim import hardware
from trnsim.hardware.derived import FIGURES, figures


def figure(name: str, key: str) -> float | None:
    spec = hardware.find(name)[0]
    return figures(spec)[key].value


@pytest.mark.parametrize(("instance", "usd_per_hour", "bf16_pflops", "expected"), [
    ("trn2.48xlarge", 35.76, 10.7, 3.34),
    ("p5.48xlarge", 55.04, 7.9, 6.97),
    ("trn1.32xlarge", 21.50, 3.04, 7.07),
    ("inf2.48xlarge", 12.98127, 2.28, 5.69),
    ("p4d.24xlarge", 21.957642, 2.5, 8.78),
])
def test_dollars_per_bf16_pflops_hour(instance, usd_per_hour, bf16_pflops, expected):
    value = figure(instance, "usd_per_bf16_pflops_hour")
    assert value == pytest.approx(usd_per_hour / bf16_pflops, rel=1e-9)
    assert value == pytest.approx(expected, abs=0.006)


@pytest.mark.parametrize(("instance", "tb_per_s", "expected"), [
    ("trn2.48xlarge", 46.4, 0.77),
    ("p5.48xlarge", 8 * 3.35, 2.05),
    ("trn1.32xlarge", 13120 * 2**30 / 1e12, 1.53),
    ("inf2.48xlarge", 9840 * 2**30 / 1e12, 1.23),
])
def test_dollars_per_tb_per_s_hour_uses_gib_where_the_source_does(instance, tb_per_s, expected):
    assert figure(instance, "hbm_tb_per_s") == pytest.approx(tb_per_s, rel=1e-9)
    assert figure(instance, "usd_per_tb_per_s_hour") == pytest.approx(expected, abs=0.006)


@pytest.mark.parametrize(("name", "key", "expected"), [
    ("trn2", "ridge_bf16", 667 / 2.9), ("trn2", "ridge_fp8", 1299 / 2.9),
    ("trn3", "ridge_bf16", 671 / 4.9), ("trn3", "ridge_fp8", 2517 / 4.9),
    ("inf2", "ridge_bf16", 190e12 / (820 * 2**30)), ("p5.48xlarge", "ridge_bf16", 7.9e15 / 26.8e12),
])
def test_ridge_points_match_the_reference_table(name, key, expected):
    assert figure(name, key) == pytest.approx(expected, rel=1e-9)


def test_ridge_points_round_to_the_published_ones():
    assert round(figure("trn2", "ridge_bf16")) == 230 and round(figure("trn2", "ridge_fp8")) == 448
    assert round(figure("trn3", "ridge_bf16")) == 137 and round(figure("trn3", "ridge_fp8")) == 514
    assert round(figure("inf2", "ridge_bf16")) == 216 and round(figure("p5.48xlarge", "ridge_bf16")) == 295


def test_hbm_per_dollar_and_plain_figures():
    assert figure("trn2.48xlarge", "hbm_gib_per_usd") == pytest.approx(1536 / 35.76)
    assert figure("p5.48xlarge", "hbm_gib") == pytest.approx(640e9 / 2**30)
    assert figure("trn2.48xlarge", "fp8_pflops") == pytest.approx(20.8)
    assert figure("trn2.48xlarge", "accelerators") == 16


def test_trainium3_fp8_is_the_mx_figure_and_says_so():
    result = figures(hardware.chip("trn3"))
    assert result["fp8_pflops"].value == pytest.approx(2.517)
    assert result["fp8_pflops"].note == "MXFP8"
    assert [field for field, _ in result["fp8_pflops"].inputs] == ["peak_flops.mxfp8"]


def test_unpriced_entries_give_no_cost_figures():
    result = figures(hardware.instance("Trn2 UltraServer"))
    assert result["usd_per_hour"].value is None and result["usd_per_bf16_pflops_hour"].value is None
    assert result["bf16_pflops"].value == pytest.approx(42.8)
    assert result["usd_per_tb_per_s_hour"].note == "no price found"
    chip = figures(hardware.chip("trn2"))
    assert chip["usd_per_hour"].value is None and chip["accelerators"].value is None
    assert chip["hbm_gib_per_usd"].note == "a chip has no price"


def test_announced_chip_shows_ratios_never_values():
    result = figures(hardware.chip("trn4"))
    assert all(f.value is None for f in result.values())
    assert result["fp8_pflops"].note == "announced: 3x Trainium3"
    assert result["hbm_tb_per_s"].note == "announced: 4x Trainium3"
    assert result["bf16_pflops"].note == "not announced"


def test_each_figure_names_its_sourced_inputs():
    result = figures(hardware.instance("trn2.48xlarge"))
    assert set(result) == set(FIGURES)
    cost = result["usd_per_bf16_pflops_hour"]
    assert [field for field, _ in cost.inputs] == ["usd_per_hour", "peak_flops.bf16"]
    assert cost.inputs[0][1].date == "2025-11-30" and "[P1]" in cost.inputs[0][1].source
