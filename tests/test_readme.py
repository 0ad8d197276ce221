"""The Python blocks of README.md run as written (in order, in one namespace)."""

import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 4
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)  # the blocks write out/ relative to the working directory
    monkeypatch.setattr(sys, "path", list(sys.path))  # the timing block adds examples/ to it
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert sorted(os.listdir(tmp_path / "out")) == ["matmul_blocked_mnk.html", "matmul_blocked_mnk.json"]
