"""The code in docs/nki.md runs as written."""

import pathlib
import re

import numpy as np

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "nki.md"


def test_quick_start_runs():
    quick_start = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    scope: dict = {}
    exec(compile(quick_start, str(DOC), "exec"), scope)
    np.testing.assert_array_equal(scope["y"], 2 * scope["x"])
    assert scope["trace_only"] == scope["trace"] and len(scope["trace"]) == 4
