"""The tour in docs/torch.md runs as written."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "torch.md"


def test_docs_tour_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/torch.md lost its tour"
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {"__name__": "docs_torch_tour"})
    printed = capsys.readouterr().out
    assert "neuron:0" in printed and "torch.bfloat16" in printed and "matmul share" in printed
