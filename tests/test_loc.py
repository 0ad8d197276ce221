"""The code-size budgets of STYLE.md hold (tools/loc.py is the counter)."""

import importlib.util
import pathlib

LOC = pathlib.Path(__file__).resolve().parents[1] / "tools" / "loc.py"


def _loc_module():
    spec = importlib.util.spec_from_file_location("trnsim_loc", LOC)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counter_ignores_comments_and_docstrings(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text('"""Doc."""\n\n# comment\nx = 1\n\n\ndef f():\n    """Doc."""\n    return x\n')
    assert _loc_module().code_lines(source) == 3


def test_packages_are_within_budget():
    loc = _loc_module()
    totals = loc.package_lines()
    for package, budget in loc.BUDGETS.items():
        assert totals.get(package, 0) <= budget, f"{package} has {totals[package]} code lines > {budget}"
