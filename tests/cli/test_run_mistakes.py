"""`trnsim run` and the command frame: a user's mistake is one line and exit code 2, never a traceback.

`--target` and `--report` are checked before the script runs (a marker file shows whether it
ran); tables written to a pipe or a file keep every cell whole.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trnsim.cli import main
from trnsim.cli import specs as specs_command
from trnsim.errors import ConfigError

SCRIPT = """
    import pathlib
    import numpy as np
    import nki
    import nki.language as nl

    pathlib.Path({marker!r}).write_text("ran")

    @nki.jit
    def {name}(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(a)))
        return out

    {name}(np.ones((128, 64), np.float32))
    {name}(np.ones((128, 64), np.float32))
"""


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "kernels.py"
    path.write_text(textwrap.dedent(SCRIPT.format(marker=str(tmp_path / "ran"), name="double")))
    return path


def refused(capsys, *argv: str) -> str:
    """The one error line of a command that must fail with exit code 2."""
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("trnsim: error: "), err
    return err


def test_report_on_an_existing_file_is_refused_before_the_script_runs(tmp_path, script, capsys):
    (tmp_path / "taken").write_text("")
    err = refused(capsys, "run", "--report", str(tmp_path / "taken"), str(script))
    assert "is an existing file, not a directory" in err
    assert not (tmp_path / "ran").exists()


def test_report_under_a_file_is_refused_before_the_script_runs(tmp_path, script, capsys):
    (tmp_path / "taken").write_text("")
    err = refused(capsys, "run", "--report", str(tmp_path / "taken" / "out"), str(script))
    assert "cannot be created" in err and not (tmp_path / "ran").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (a place nothing can be written)")
def test_an_unwritable_report_directory_is_refused_before_the_script_runs(tmp_path, script, capsys):
    err = refused(capsys, "run", "--report", "/proc/trnsim-report", str(script))
    assert "is not writable" in err and not (tmp_path / "ran").exists()


def test_a_failed_report_write_leaves_no_half_written_directory(tmp_path, script, capsys, monkeypatch):
    """Two files are in place when the third fails to move: none may stay, nor the directory."""
    calls = []
    replace = os.replace

    def failing_replace(source, destination):
        calls.append(destination)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return replace(source, destination)

    monkeypatch.setattr(os, "replace", failing_replace)
    err = refused(capsys, "run", "--target", "trn2", "--report", str(tmp_path / "out" / "deep"), str(script))
    assert "cannot write" in err and "No space left on device" in err and len(calls) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernels.py", "ran"]


def test_a_report_file_blocked_by_a_directory_leaves_the_others_unwritten(tmp_path, script, capsys):
    out = tmp_path / "out"
    (out / "double_2.json").mkdir(parents=True)
    err = refused(capsys, "run", "--target", "trn2", "--report", str(out), str(script))
    assert "double_2.json" in err and "is a directory" in err
    assert sorted(p.name for p in out.iterdir()) == ["double_2.json"]


def test_report_files_land_in_an_existing_directory_beside_what_is_there(tmp_path, script, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("")
    assert main(["run", "--target", "trn2", "--report", str(out), str(script)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["double_1.html", "double_1.json", "double_2.html",
                                                     "double_2.json", "keep.txt"]
    assert "wrote " in capsys.readouterr().err


@pytest.mark.parametrize(("target", "expected"), [
    ("trn5", "--target 'trn5' is not a target — did you mean trn3, trn2, trn1? targets: trn1, inf2, trn2"),
    ("NeuronCore-v9", "--target 'NeuronCore-v9' is not a target — targets: trn1, inf2, trn2, trn3"),
    ("inf1", "--target 'inf1' is not a target (NeuronCore-v1 has no published timing figures)"),
    ("trn2,", None),
    ("", "--target '' names no target"),
])
def test_target_is_checked_before_the_script_runs_and_suggests_targets(tmp_path, script, capsys, target,
                                                                      expected):
    if expected is None:
        assert main(["run", "--target", target, str(script)]) == 0
        return
    err = refused(capsys, "run", "--target", target, str(script))
    assert err.startswith(f"trnsim: error: {expected}") and "NeuronCore-v4" not in err
    assert not (tmp_path / "ran").exists()


def test_a_directory_as_the_script_says_so(tmp_path, capsys):
    err = refused(capsys, "run", str(tmp_path))
    assert err == f"trnsim: error: script '{tmp_path}' is a directory — give the Python file to run\n"


def test_a_missing_script_says_so(tmp_path, capsys):
    assert refused(capsys, "run", str(tmp_path / "nope.py")).endswith("does not exist\n")


def test_a_script_exception_shows_the_scripts_traceback_only(tmp_path, capsys):
    script = tmp_path / "bad.py"
    script.write_text("def f():\n    raise ValueError('boom')\n\nf()\n")
    assert main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and f'File "{script}", line 4' in err and "ValueError: boom" in err
    assert "trnsim" not in err


def test_sys_exit_with_a_message_prints_it(tmp_path, capsys):
    script = tmp_path / "stop.py"
    script.write_text("import sys\nsys.exit('bad input')\n")
    assert main(["run", str(script)]) == 1
    assert capsys.readouterr().err == "bad input\n"


def test_ctrl_c_exits_130_without_a_traceback(tmp_path, capsys):
    script = tmp_path / "stop.py"
    script.write_text("raise KeyboardInterrupt\n")
    assert main(["run", str(script)]) == 130
    assert capsys.readouterr().err == "trnsim: interrupted\n"


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("usage: trnsim")


def test_an_error_message_spanning_lines_is_printed_as_one(capsys, monkeypatch):
    def fail(args):
        raise ConfigError("first line\nsecond line")

    monkeypatch.setattr(specs_command, "run", fail)
    assert refused(capsys, "specs") == "trnsim: error: first line second line\n"


def test_a_bad_setting_is_one_line_even_when_the_command_fails_too(capsys, monkeypatch):
    monkeypatch.setenv("TRNSIM_DEBUG", "maybe")
    err = refused(capsys, "specs", "trn9")
    assert err == "trnsim: error: TRNSIM_DEBUG='maybe' is not a flag — use 1 or 0\n"


def test_a_closed_pipe_ends_quietly():
    """`trnsim specs --json | head -1`: the reader stops early; no BrokenPipeError traceback."""
    process = subprocess.Popen([sys.executable, "-m", "trnsim", "specs", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout.readline() == b"[\n"
    process.stdout.close()
    assert process.wait(timeout=60) == 1
    assert process.stderr.read() == b""


def test_data_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "data").write_text("")
    assert "cannot read hardware data file" in refused(capsys, "specs", "--data", str(tmp_path / "data"))


def piped(*argv: str, to_file: Path | None = None) -> list[str]:
    """The lines `trnsim ARGV` writes to a pipe (or to a file), as a user's `| cat` sees them."""
    if to_file is None:
        result = subprocess.run([sys.executable, "-m", "trnsim", *argv], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()
    with to_file.open("w") as handle:
        assert subprocess.run([sys.executable, "-m", "trnsim", *argv], stdout=handle).returncode == 0
    return to_file.read_text().splitlines()


def row(lines: list[str], first_cell: str) -> str:
    """The first table row whose first cell is `first_cell`."""
    return next(line for line in lines if line.startswith(f"│ {first_cell} "))


def test_piped_run_table_keeps_long_kernel_names_and_units_whole(tmp_path):
    name = "a_kernel_with_a_rather_long_descriptive_name"
    script = tmp_path / "long.py"
    script.write_text(textwrap.dedent(SCRIPT.format(marker=str(tmp_path / "ran"), name=name)))
    lines = piped("run", "--target", "trn1,trn2,trn3", str(script))
    assert any("latency µs" in line and "DMA GB/s" in line for line in lines)
    second = [line.split("│")[2].strip() for line in lines if line.startswith(f"│ {name}#2 ")]
    assert second == ["trn1", "trn2", "trn3"]


def test_piped_specs_detail_with_sources_keeps_each_fact_on_one_line(tmp_path):
    lines = piped("specs", "Trainium2", "--sources", to_file=tmp_path / "specs.txt")
    bf16 = row(lines, "peak_flops.bf16")
    assert "667 TFLOPS*" in bf16 and "632 TFLOPS ([S10] 8 cores x 79)" in bf16 and "x 2.4 GHz) │" in bf16


def test_piped_compare_keeps_every_column(tmp_path):
    names = ["trn2.48xlarge", "p5.48xlarge", "trn1.32xlarge", "inf2.48xlarge", "p4d.24xlarge"]
    lines = piped("compare", *names, "--sources")
    price = row(lines, "On-demand price")
    assert "$35.76 (as of 2025-11-30)[P1]" in price and "$21.96 (as of 2026-08-26)*[P1][P2]" in price
    trn2 = [line for line in lines if line.startswith("  [S5] Amazon EC2 Trn2 Architecture")]
    assert trn2 and "https://" in trn2[0]


def test_report_file_names_stay_distinct_when_labels_do_not():
    """Launch labels `k#1` and `k_1` both became k_1.html: the report directory was then refused.
    A kernel launched once keeps its own name; the numbered launch gives way."""
    from trnsim.cli.run import unique_stems
    assert unique_stems(["k#1", "k_1", "a/b", "a_b", "K#1"]) == ["k_1-2", "k_1", "a_b-2", "a_b", "K_1-3"]


def test_launch_labels_are_distinct_and_a_kernel_launched_once_keeps_its_name():
    from trnsim.cli.run import launch_labels, unique_stems

    labels = launch_labels(["k#1", "k", "k", "..", "kernel"])
    assert labels == ["k#1", "k#2", "k#3", "..", "kernel"]
    assert unique_stems(labels) == ["k_1", "k_2", "k_3", "kernel-2", "kernel"]
