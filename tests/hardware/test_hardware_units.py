"""Unit conversion is exact for what sources write, and formatting reads back the same figure."""

import pytest

from trnsim.hardware.units import UNITS, format_bytes, format_value, to_si


@pytest.mark.parametrize(("value", "unit", "expected"), [
    (2.9, "TB/s", 2.9e12), (820, "GiB/s", 820 * 2**30), (3200, "Gbps", 4e11), (17, "B/ns", 17e9),
    (0.96, "GHz", 9.6e8), (1.3, "us", 1.3e-6), (600, "ns", 6e-7), (224, "KiB", 229376),
    (0.064, "PFLOPS", 6.4e13), (96, "GiB", 96 * 2**30),
])
def test_to_si_is_exact(value, unit, expected):
    assert to_si(value, unit)[1] == expected


def test_integral_inputs_stay_integers_and_dimensions_are_reported():
    assert to_si(192, "KiB") == ("bytes", 196608) and isinstance(to_si(192, "KiB")[1], int)
    assert {dimension for dimension, _ in UNITS.values()} == {"bytes", "bytes_per_s", "hz", "flops", "s"}
    with pytest.raises(KeyError):
        to_si(1, "furlongs")


@pytest.mark.parametrize(("value", "dimension", "text"), [
    (196608, "bytes", "192 KiB"), (640 * 10**9, "bytes", "640 GB"), (1536 * 2**30, "bytes", "1,536 GiB"),
    (2.9e12, "bytes_per_s", "2.9 TB/s"), (2.4e9, "hz", "2.4 GHz"), (667e12, "flops", "667 TFLOPS"),
    (1.3e-6, "s", "1.3 µs"), (6e-7, "s", "600 ns"), (35.76, "usd_per_hour", "$35.76/h"),
    (None, "bytes", "—"), (frozenset({"b", "a"}), "names", "a, b"),
])
def test_format_value(value, dimension, text):
    assert format_value(value, dimension) == text


def test_format_bytes_prefers_exact_binary_prefixes():
    assert format_bytes(2048) == "2 KiB" and format_bytes(16 * 2**20) == "16 MiB"
    assert format_bytes(24 * 10**9) == "24 GB"
