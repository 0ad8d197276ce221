"""`trnsim specs` and `trnsim compare`: tables, --sources, --json, and one-line errors."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from trnsim.cli import main
from trnsim.hardware.catalog import DATA_DIR

ACCEPTANCE = ["trn2.48xlarge", "p5.48xlarge", "trn1.32xlarge", "inf2.48xlarge"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_prints_every_figure_for_the_acceptance_instances(capsys):
    code, out, err = run_cli(capsys, "compare", *ACCEPTANCE)
    assert code == 0 and err == ""
    for text in ("Dense BF16", "Dense FP8", "HBM bandwidth", "On-demand price", "$ per BF16 PFLOPS-hour",
                 "$ per TB/s-hour", "Ridge point BF16", "HBM GiB per $/h", *ACCEPTANCE):
        assert text in out
    for figure in ("$3.34", "$6.97", "$7.07", "$5.69", "$0.77", "$2.05", "$1.53", "$1.23", "$35.76"):
        assert figure in out


def test_compare_json_carries_values_and_sources(capsys):
    code, out, _ = run_cli(capsys, "compare", *ACCEPTANCE, "--json")
    data = json.loads(out)
    assert code == 0 and data["columns"] == ACCEPTANCE
    cost = data["figures"]["usd_per_bf16_pflops_hour"]["values"]
    assert cost["trn2.48xlarge"]["value"] == pytest.approx(35.76 / 10.7)
    assert cost["p5.48xlarge"]["value"] == pytest.approx(55.04 / 7.9)
    inputs = {i["field"]: i for i in cost["trn2.48xlarge"]["inputs"]}
    assert inputs["usd_per_hour"]["date"] == "2025-11-30" and inputs["usd_per_hour"]["source"] == "[P1]"
    assert data["figures"]["ridge_bf16"]["unit"] == "FLOP/B"


def test_compare_sources_lists_numbered_sources(capsys):
    code, out, _ = run_cli(capsys, "compare", "trn2.48xlarge", "p5.48xlarge", "--sources")
    assert code == 0
    assert "$3.34*[P1][S5]" in out and "$6.97*[P1][P2][H1]" in out
    assert "  [S5] Amazon EC2 Trn2 Architecture (Neuron docs): https://" in out


def test_compare_labels_the_announced_chip(capsys):
    code, out, _ = run_cli(capsys, "compare", "trn3", "trn4")
    assert code == 0
    assert "Trainium4 (announced)" in out and "announced: 3x Trainium3" in out
    data = json.loads(run_cli(capsys, "compare", "trn4", "--json")[1])
    fp8 = data["figures"]["fp8_pflops"]["values"]["Trainium4"]
    assert fp8 == {"value": None, "note": "announced: 3x Trainium3", "announced": True, "inputs": []}


def test_specs_summary_has_all_three_tables(capsys):
    code, out, _ = run_cli(capsys, "specs")
    assert code == 0
    for text in ("Cores", "Chips", "Instances", "NeuronCore-v3", "224 KiB", "Trainium4 (announced)",
                 "Trn3 Gen2 UltraServer", "$35.76/h (2025-11-30)", "NeuronCore-v1 (partial)"):
        assert text in out


def test_specs_sources_lists_every_document_of_the_catalog_with_its_urls(capsys):
    from trnsim.hardware.catalog import default_catalog

    code, out, _ = run_cli(capsys, "specs", "--sources")
    assert code == 0 and "│ trn2.48xlarge " in out and "$35.76/h (2025-11-30)[P1]" in out
    listed = [line.split("]")[0].strip(" [") for line in out.splitlines() if line.startswith("  [")]
    assert listed == list(default_catalog().documents)
    assert ("  [SDK-2.26] nki.isa API reference of Neuron SDK 2.26 (instruction cost formulas in the "
            "docstrings): https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.0/") in out


def test_specs_detail_with_sources_shows_the_alternatives(capsys):
    code, out, _ = run_cli(capsys, "specs", "Trainium2", "--sources")
    assert code == 0
    assert "chip Trainium2" in out and "hbm_bytes_per_s" in out
    assert "3.0 TB/s ([S10]" in out


def test_bracketed_source_keys_are_printed_not_read_as_markup(capsys):
    out = run_cli(capsys, "specs", "v3", "--sources")[1]
    assert "[NKI-MATMUL]" in out and "[SDK-2.26]" in out


def test_specs_json_for_a_core_alias(capsys):
    code, out, _ = run_cli(capsys, "specs", "v3", "--json")
    [core] = json.loads(out)
    assert code == 0 and core["kind"] == "core" and core["name"] == "NeuronCore-v3"
    sbuf = core["facts"]["sbuf_bytes_per_partition"]
    assert sbuf["value"] == 229376 and sbuf["written"] == "224 KiB" and sbuf["source"] == "[S10]"
    assert core["facts"]["engines.tensor.clock_hz"]["value"] == 2.4e9


def test_a_name_that_is_chip_and_core_shows_both(capsys):
    kinds = [entry["kind"] for entry in json.loads(run_cli(capsys, "specs", "trn2", "--json")[1])]
    assert kinds == ["chip", "core"]


def test_unknown_name_is_one_line_with_close_matches(capsys):
    code, out, err = run_cli(capsys, "specs", "trn9")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("trnsim: error: unknown hardware name 'trn9'")
    assert "did you mean" in err and "Trainium2" in err


@pytest.mark.parametrize("name", ["gen3", "nki-isa-2.26"])
def test_compare_rejects_a_core_generation_or_cost_table(capsys, name):
    code, _, err = run_cli(capsys, "compare", "trn2.48xlarge", name)
    assert code == 2 and err.startswith(f"trnsim: error: '{name}' names a NeuronCore generation")


def test_specs_shows_a_cost_table(capsys):
    code, out, _ = run_cli(capsys, "specs", "nki-isa-2.26", "--json")
    [table] = json.loads(out)
    assert code == 0 and table["kind"] == "cost_table"
    assert table["facts"]["instructions.iota.fixed_cycles"]["value"] == 150


@pytest.mark.parametrize(("old", "new", "message"), [
    ('hbm_bytes_per_s = { value = 2.9,', 'hbm_bytes_per_s = { value = -2.9,',
     "chips.toml: [Trainium2] hbm_bytes_per_s: must be positive, got -2.9"),
    ('cores = { value = 8, source = "[S4]" }', 'cores = { value = 8 }',
     "chips.toml: [Trainium2] cores: missing source"),
])
def test_corrupted_data_gives_one_line_and_no_traceback(tmp_path, old, new, message):
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    chips = data / "chips.toml"
    chips.write_text(chips.read_text().replace(old, new, 1))
    result = subprocess.run([sys.executable, "-m", "trnsim", "specs", "--data", str(data)],
                            capture_output=True, text=True, env={**os.environ, "TRNSIM_DEBUG": "0"})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"trnsim: error: {message}") and result.stderr.count("\n") == 1


def test_the_installed_command_reports_an_unknown_name_without_traceback():
    result = subprocess.run([sys.executable, "-m", "trnsim", "specs", "trn9"], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("trnsim: error: unknown hardware name 'trn9'")
