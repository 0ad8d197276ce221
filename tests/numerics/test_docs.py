"""The code in docs/numerics.md runs as written."""

import pathlib
import re

DOC = pathlib.Path(__file__).parents[2] / "docs" / "numerics.md"


def test_doc_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["w"].dtype.name == "float32" and namespace["y"].dtype.name == "bfloat16"
