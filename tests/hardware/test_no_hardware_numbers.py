"""No hardware number is written anywhere in src/trnsim outside trnsim.hardware.

The rule, kept simple so a failure is easy to act on. A numeric literal in a .py file outside
src/trnsim/hardware/ is flagged when
  1. it equals a figure of the hardware catalog (in SI units) that is distinctive: neither a
     power of ten nor a power of two, and either of magnitude at least 1000, below 1e-3, or a
     fraction with three or more significant digits (196608, 2.8e9, 17e9, 1.3e-6, 35.76 and 0.425
     are flagged). Small numbers (128, 64, 0.5, 0.9) and powers of two (1024, 2048, 16384) are too
     common as unit factors and software tile sizes to mean hardware by their value alone; or
  2. it lies between 1e6 and 1e18 — the range of clocks, bandwidths, sizes and flops — and is not
     a power of ten or 2**k (+-1), which are unit conversions and integer limits.
Hex, octal and binary literals are bit patterns, not measurements, and are skipped. The fix for
a flagged literal is to ask trnsim.hardware for the figure (it has the source beside it).
"""

import io
import math
import pathlib
import tokenize

from trnsim import hardware
from trnsim.hardware.describe import rows

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "trnsim"


def _power_of(base: int, value: float) -> bool:
    if value <= 0:
        return False
    exponent = round(math.log(value, base))
    return math.isclose(value, float(base) ** exponent, rel_tol=1e-12)


def _distinctive(value: float) -> bool:
    magnitude = abs(value)
    if _power_of(10, magnitude) or _power_of(2, magnitude):
        return False
    fraction_digits = len(repr(magnitude).replace(".", "").strip("0"))
    precise_fraction = not magnitude.is_integer() and fraction_digits >= 3
    return magnitude >= 1000 or 0 < magnitude < 1e-3 or precise_fraction


def catalog_figures() -> set[float]:
    specs = [*hardware.cores(), *hardware.chips(), *hardware.instances()]
    specs += [core.costs for core in hardware.cores() if core.costs is not None]
    found = set()
    for spec in specs:
        for row in rows(spec):
            if isinstance(row.value, int | float) and not isinstance(row.value, bool):
                found.add(float(row.value))
            if row.sourced is not None:
                found.update(float(a.value) for a in row.sourced.alternatives
                             if isinstance(a.value, int | float))
    return {value for value in found if _distinctive(value)}


def numeric_literals(path: pathlib.Path):
    """(line, text, value) of every decimal numeric literal in a Python file."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    for token in tokens:
        text = token.string.replace("_", "").lower()
        if token.type != tokenize.NUMBER or text.startswith(("0x", "0o", "0b")) or text.endswith("j"):
            continue
        yield token.start[0], token.string, float(text)


def _scale_of_hardware(value: float) -> bool:
    magnitude = abs(value)
    if not 1e6 <= magnitude <= 1e18 or _power_of(10, magnitude):
        return False
    return not any(_power_of(2, magnitude + delta) for delta in (-1, 0, 1))


def offending_literals(root: pathlib.Path) -> list[str]:
    figures = catalog_figures()
    problems = []
    for path in sorted(root.rglob("*.py")):
        if "hardware" in path.relative_to(root).parts:
            continue
        for line, text, value in numeric_literals(path):
            if value in figures or _scale_of_hardware(value):
                problems.append(f"{path.relative_to(root.parent)}:{line}: {text}")
    return problems


def test_no_hardware_literals_outside_the_hardware_package():
    assert offending_literals(SRC) == []


def test_the_scan_catches_planted_figures(tmp_path):
    package = tmp_path / "trnsim"
    (package / "core").mkdir(parents=True)
    (package / "hardware").mkdir()
    (package / "core" / "timing.py").write_text(
        "CLOCK_HZ = 2.8e9\nSBUF = 196_608\nLAT = 1.3e-6\nPRICE = 35.76\nBW = 17e9\n"
        "OK = (128, 64, 0.5, 0.9, 1024, 2048, 10**9, 1e12, 2**31 - 1, 0xFFFF)\n")
    (package / "hardware" / "data.py").write_text("CLOCK_HZ = 2.8e9\n")
    flagged = offending_literals(package)
    assert [item.split(": ")[1] for item in flagged] == ["2.8e9", "196_608", "1.3e-6", "35.76", "17e9"]
    assert all(item.startswith("trnsim/core/timing.py:") for item in flagged)
