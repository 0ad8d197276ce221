"""Export the public old-API (`neuronxcc.nki`) kernels tests/nki/legacy/test_published_legacy.py runs.

    python tools/export_legacy_kernels.py /tmp/legacy-kernels [--mirror /work/.mirror]
    TRNSIM_LEGACY_KERNELS=/tmp/legacy-kernels python -m pytest tests/nki/legacy -q

Each source is `git archive`d from a local bare clone (the mirror directory holds
`aws-neuron+<repo>/repo`), at the commit listed in SOURCES, into `<out>/<folder>/`.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import tarfile
from pathlib import Path

SOURCES = {
    # folder: (repository, commit, paths)
    "aws-neuron-sdk": ("aws-neuron-sdk", "1043931fc6018761f2a6faab70a1b24d00b543d3",  # tag v2.26.1
                       ["nki/test", "nki/examples"]),
    "nki-samples": ("nki-samples", "fc5c69f79c899d719f6c351fd01acf3c419a6b8b",  # last before beta 2
                    ["src/nki_samples/tutorials", "src/nki_samples/reference", "test/unit"]),
    "nki-samples-attention": ("nki-samples", "c9c0ab0ff4cb66e6d46c91716568a6734e9c78ce",  # perf series
                              ["src/nki_samples/tutorials/attention_fwd_performance"]),
}


def export(out: Path, mirror: Path) -> None:
    for folder, (repository, commit, paths) in SOURCES.items():
        git_dir = mirror / f"aws-neuron+{repository}" / "repo"
        archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", commit, *paths],
                                 check=True, capture_output=True).stdout
        target = out / folder
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(target, filter="data")
        print(f"{folder}: {repository}@{commit[:12]} {' '.join(paths)} -> {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    arguments = parser.parse_args()
    export(arguments.out, arguments.mirror)


if __name__ == "__main__":
    main()
