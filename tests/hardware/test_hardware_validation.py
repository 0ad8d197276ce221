"""The loader refuses malformed data with one SpecError naming file, entry, field and problem.

Each test corrupts a copy of the real data directory (tmp_path), never the checked-in files.
"""

import re
import shutil
import tempfile
from pathlib import Path

from catalog_copies import corrupt, load_error
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim import hardware
from trnsim.hardware.catalog import DATA_DIR


def test_an_unchanged_copy_loads_like_the_package_data(data):
    catalog = hardware.load(data)
    assert catalog.core("trn2").sbuf_bytes_per_partition == hardware.core("trn2").sbuf_bytes_per_partition
    assert catalog.data_dir == data


def test_negative_bandwidth_is_named(data):
    corrupt(data, "chips.toml", 'hbm_bytes_per_s = { value = 2.9,', 'hbm_bytes_per_s = { value = -2.9,')
    assert load_error(data) == "chips.toml: [Trainium2] hbm_bytes_per_s: must be positive, got -2.9"


def test_not_a_number_is_named(data):
    corrupt(data, "chips.toml", 'hbm_bytes_per_s = { value = 2.9,', 'hbm_bytes_per_s = { value = nan,')
    assert load_error(data) == "chips.toml: [Trainium2] hbm_bytes_per_s: must be a finite number, got nan"


def test_missing_source_is_named(data):
    corrupt(data, "cores.toml", 'psum_banks = { value = 8, source = "[S10]" }',
            'psum_banks = { value = 8 }')
    message = load_error(data)
    assert message.startswith("cores.toml: [NeuronCore-v3] psum_banks: missing source")


def test_bare_number_without_source_is_named(data):
    corrupt(data, "cores.toml", 'psum_banks = { value = 8, source = "[S10]" }', "psum_banks = 8")
    assert load_error(data).startswith("cores.toml: [NeuronCore-v3] psum_banks: 8 has no source")


def test_missing_field_is_named(data):
    corrupt(data, "cores.toml", 'psum_banks = { value = 8, source = "[S10]" }\n', "")
    assert load_error(data).startswith("cores.toml: [NeuronCore-v3] psum_banks: missing field")


def test_wrong_type_is_named(data):
    corrupt(data, "instances.toml", 'accelerators = { value = 16, source = "[S1]"',
            'accelerators = { value = "sixteen", source = "[S1]"')
    assert load_error(data).startswith("instances.toml: [inf1.24xlarge] accelerators: expected a number")


def test_unknown_key_is_named(data):
    corrupt(data, "chips.toml", '["Trainium2"]\n', '["Trainium2"]\nhbm_colour = "blue"\n')
    message = load_error(data)
    assert message.startswith("chips.toml: [Trainium2]: unknown key 'hbm_colour'")


def test_unit_of_the_wrong_dimension_is_named(data):
    corrupt(data, "chips.toml", 'hbm_bytes = { value = 96, unit = "GiB"',
            'hbm_bytes = { value = 96, unit = "GHz"')
    assert load_error(data).startswith("chips.toml: [Trainium2] hbm_bytes: unit 'GHz' measures hz")


def test_fractional_byte_count_is_named(data):
    corrupt(data, "cores.toml", 'psum_bank_bytes = { value = 2, unit = "KiB", source = "[S10]" }',
            'psum_bank_bytes = { value = 2.0001, unit = "KiB", source = "[S10]" }')
    assert "[NeuronCore-v3] psum_bank_bytes: must be a whole number of bytes" in load_error(data)


def test_price_without_date_is_named(data):
    corrupt(data, "instances.toml", 'usd_per_hour = { value = 35.76, date = "2025-11-30", ',
            'usd_per_hour = { value = 35.76, ')
    assert load_error(data).startswith("instances.toml: [trn2.48xlarge] usd_per_hour: a price needs date")


def test_alternative_without_source_is_named(data):
    corrupt(data, "chips.toml", ('{ value = 3.0, unit = "TB/s", '
                                 'source = "[S10]", '),
            '{ value = 3.0, unit = "TB/s", ')
    message = load_error(data)
    assert message.startswith("chips.toml: [Trainium2] hbm_bytes_per_s.alternatives[0]: missing source")


def test_dangling_reference_is_named(data):
    corrupt(data, "chips.toml", 'core = "NeuronCore-v3"', 'core = "NeuronCore-v9"')
    assert load_error(data).startswith("chips.toml: [Trainium2] core: names unknown core 'NeuronCore-v9'")


def test_error_inside_an_engine_names_the_engine(data):
    corrupt(data, "cores.toml", 'clock_hz = { value = 0.96, unit = "GHz"',
            'clock_hz = { value = 0, unit = "GHz"')
    expected = "cores.toml: [NeuronCore-v3.engines.vector] clock_hz: must be positive"
    assert load_error(data).startswith(expected)


def test_duplicate_alias_is_named(data):
    corrupt(data, "chips.toml", 'aliases = ["trn3"]', 'aliases = ["trn3", "trn2"]')
    assert re.match(r"chips\.toml: \[Trainium3\] aliases: 'trn2' already names chip 'Trainium2'",
                    load_error(data))


def test_toml_syntax_error_names_the_file(data):
    (data / "costs.toml").write_text("[broken\n")
    assert load_error(data).startswith("costs.toml: not valid TOML")


def test_missing_file_is_named(data):
    (data / "instances.toml").unlink()
    assert "instances.toml is missing" in load_error(data)


NUMERIC_VALUE = re.compile(r"value = -?[0-9][0-9_.e+-]*")
BAD_VALUES = ["-1", "-0.5", '"many"', "true", "[1, 2]", "nan", "-inf", "{ x = 1 }"]


@settings(max_examples=30, deadline=None)
@given(file=st.sampled_from(["cores.toml", "chips.toml", "instances.toml", "costs.toml"]),
       pick=st.integers(min_value=0), bad=st.sampled_from(BAD_VALUES))
def test_any_bad_figure_gives_a_spec_error_naming_the_file_and_entry(file, pick, bad):
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        shutil.copytree(DATA_DIR, data)
        text = (data / file).read_text()
        matches = list(NUMERIC_VALUE.finditer(text))
        match = matches[pick % len(matches)]
        (data / file).write_text(f"{text[:match.start()]}value = {bad}{text[match.end():]}")
        message = load_error(data)
    assert message.startswith(f"{file}: [")
