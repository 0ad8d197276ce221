"""`trnsim nccom`: nccom-test's flags, table and JSON, with predicted times."""

import json
import time

import pytest

from trnsim.cli import main
from trnsim.cli.nccom import parse_size, sizes

HEADER = "size(B)    count(elems)     type    time:avg(us)    algbw(GB/s)    busbw(GB/s)"


def test_issue_command_prints_table_fast(capsys):
    start = time.perf_counter()
    assert main(["nccom", "-r", "64", "-b", "8K", "-e", "1G", "-f", "2", "--op", "all_reduce",
                 "--instance", "trn2.48xlarge", "--show-algorithm"]) == 0
    assert time.perf_counter() - start < 10
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [*HEADER.split(), "algorithm"]
    body = [line.split() for line in lines[1:] if line.strip()[:1].isdigit()]
    assert [int(row[0]) for row in body] == [8192 * 2**k for k in range(18)]
    assert body[0][2] == "uint8" and body[-1][-1] == "kangaring"
    assert lines[-2].startswith("Avg bus bandwidth:") and "predicted" in lines[-1]


def test_json_matches_nccom_schema(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["nccom", "allg", "-r", "16", "-b", "1kb", "-e", "1mb", "-f", "8", "-d", "fp32", "--json",
                 "--report-to-json-file", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    first = printed["results"][0]
    assert list(first) == HEADER.split()
    assert (first["size(B)"], first["count(elems)"], first["type"]) == (1024, 256, "fp32")
    assert [r["size(B)"] for r in printed["results"]] == [1024, 8192, 65536, 524288]
    assert "prediction" in printed


def test_custom_replica_groups_and_nodes(capsys, tmp_path):
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps([list(range(0, 64, 4)), *[list(range(i, 64, 4)) for i in (1, 2, 3)]]))
    assert main(["nccom", "allr", "-r", "64", "-b", "512M", "--custom-replica-groups", str(groups),
                 "--show-algorithm"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-1] == "ring"
    assert main(["nccom", "allr", "-r", "128", "-N", "2", "--show-algorithm"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-1] == "hier"


@pytest.mark.parametrize("argv, text", [
    (["nccom", "-r", "16"], "name the collective"),
    (["nccom", "bcast", "-r", "16"], "unknown collective"),
    (["nccom", "allr", "-r", "16", "--stats", "p50"], "avg"),
    (["nccom", "allr", "-r", "16", "--target", "trn9"], "--target"),
    (["nccom", "allr", "-r", "16", "-b", "1M", "-e", "1K"], "above"),
    (["nccom", "allr", "-r", "16", "-b", "1M", "-e", "1G", "-i", "1"], "at most 10,000"),  # was a 10 GB hang
    (["nccom", "allr", "-r", "16", "--plot", "b.txt"], "its name must end in one of"),
])
def test_mistakes_are_one_line_errors(capsys, argv, text):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("trnsim: error:") and text in err


def test_a_bad_size_option_says_what_a_size_is(capsys):
    """argparse printed "invalid parse_size value" (the function's name) for -b -5."""
    with pytest.raises(SystemExit) as stopped:
        main(["nccom", "allr", "-r", "16", "-b", "-5"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "argument -b/--minbytes: not a size in bytes: '-5'" in err
    assert "parse_size" not in err


def test_sizes_and_steps():
    assert [parse_size(s) for s in ("8K", "1G", "2kb", "32M")] == [8192, 2**30, 2048, 2**25]
    assert sizes(8, 32, None, 2) == [8, 16, 32]
    assert sizes(8, 16, 4, None) == [8, 12, 16]


def test_busbw_plot_and_topology_picture(tmp_path, capsys):
    from trnsim.system.pictures import topology_picture

    plot = tmp_path / "busbw.png"
    assert main(["nccom", "allr", "-r", "16", "-b", "8K", "-e", "1M", "-f", "8", "--plot", str(plot),
                 "--plot-ranks", "4,16"]) == 0
    assert plot.stat().st_size > 1000
    for instance in ("trn2.48xlarge", "Trn3 Gen1 UltraServer"):
        assert topology_picture(instance, tmp_path / "t.png").stat().st_size > 1000


def test_specs_shows_fabrics_and_one_topology(capsys, tmp_path):
    assert main(["specs", "fabrics"]) == 0
    out = capsys.readouterr().out
    assert "Fabrics" in out and "Trn3 Gen2 UltraServer" in out and "128 GB/s" in out
    picture = tmp_path / "topo.png"
    assert main(["specs", "--topology", "trn2.48xlarge", "--sources", "--picture", str(picture)]) == 0
    out = capsys.readouterr().out
    assert "node of 16 chips (64 ranks)" in out and "[S16]" in out and picture.exists()
    assert main(["specs", "--topology", "trn2.3xlarge"]) == 2
    assert "no chip network" in capsys.readouterr().err


def test_a_topology_as_json_still_draws_its_picture(capsys, tmp_path):
    picture = tmp_path / "topo.png"
    assert main(["specs", "--topology", "trn2.48xlarge", "--json", "--picture", str(picture)]) == 0
    assert json.loads(capsys.readouterr().out) and picture.stat().st_size > 1000


SCRIPT = '''
import numpy as np
import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl


@nki.jit
def summed(x):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=ncc.ReplicaGroup([[0, 1, 2, 3]]), op=nl.add)
    nisa.dma_copy(dst=out, src=dst)
    return out


print("total", float(summed(np.ones((4, 8), np.float32)).sum()))
'''


def test_trnsim_run_ranks_launches_every_kernel_on_n_ranks(tmp_path, capsys):
    script = tmp_path / "collective_script.py"
    script.write_text(SCRIPT)
    assert main(["run", "--ranks", "4", "--target", "trn2", str(script)]) == 0
    out = capsys.readouterr().out
    assert "total 128.0" in out and "summed" in out  # 4 ranks' ones summed: 4 x 32 elements
    assert main(["run", "--ranks", "0", str(script)]) == 2


def test_pictures_need_a_picture_suffix_and_make_their_folder(tmp_path, capsys):
    """A name without a picture suffix wrote noext.png (not the path given), and a missing folder
    was a matplotlib traceback; --plot-ranks with a non-number was a ValueError traceback."""
    plan = ["plan", "train", "--model", "llama-2-7b", "--instance", "trn1.32xlarge", "--plot"]
    assert main([*plan, str(tmp_path / "noext")]) == 2
    assert "its name must end in one of" in capsys.readouterr().err
    assert not (tmp_path / "noext").exists() and not (tmp_path / "noext.png").exists()
    assert main([*plan, str(tmp_path / "new" / "plan.png")]) == 0
    assert (tmp_path / "new" / "plan.png").stat().st_size > 1000
    with pytest.raises(SystemExit):
        main(["nccom", "allr", "-r", "16", "--plot", str(tmp_path / "b.png"), "--plot-ranks", "4,x"])


@pytest.mark.parametrize("argv, text", [
    (["nccom", "allr", "--op", "allg", "-r", "64"], "two collectives named"),  # ran all_gather
    (["nccom", "allr", "-r", "64", "--target", "trn1", "--instance", "trn2.48xlarge"],
     "both name the system"),
    (["nccom", "allr", "-r", "16", "--plot-ranks", "4"], "--plot-ranks without --plot"),
    (["specs", "--picture", "x.png"], "--picture draws a --topology"),
    (["specs", "trn2", "--topology", "trn2.48xlarge"], "would be ignored"),
])
def test_flags_that_would_be_ignored_are_refused(capsys, argv, text):
    assert main(argv) == 2 and text in capsys.readouterr().err


@pytest.mark.parametrize("argv, text", [
    (["-f", "nan"], "-f must be a finite number above 1"),  # a raw ValueError traceback
    (["-f", "inf"], "-f must be a finite number above 1"),  # a raw OverflowError traceback
    (["-b", "2000000", "-e", "1T", "-f", "1.000001"], "makes over 10,000 sizes"),  # ran for minutes
])
def test_step_factors_that_cannot_make_a_table_are_refused(capsys, argv, text):
    assert main(["nccom", "allr", "-r", "8", *argv]) == 2 and text in capsys.readouterr().err


@pytest.mark.parametrize("groups, extra, text", [
    ([[0, "1"]], [], "lists of integer ranks"),  # a raw TypeError
    ([[0, 1]], ["-N", "2"], "-N and --custom-replica-groups both place the ranks"),  # -N was ignored
])
def test_replica_group_files_are_checked(tmp_path, capsys, groups, extra, text):
    path = tmp_path / "groups.json"
    path.write_text(json.dumps(groups))
    argv = ["nccom", "allr", "-r", "2", "--custom-replica-groups", str(path), *extra]
    assert main(argv) == 2 and text in capsys.readouterr().err


def test_a_plot_that_cannot_be_written_leaves_no_json_report(tmp_path, capsys):
    report = tmp_path / "r.json"
    argv = ["nccom", "allr", "-r", "8", "--report-to-json-file", str(report),
            "--plot", str(tmp_path / "b.txt")]
    assert main(argv) == 2 and "cannot write a picture" in capsys.readouterr().err
    assert not report.exists()


def test_a_ring_of_chips_is_drawn(tmp_path):
    """inf2.48xlarge's 12 chips form a one-dimensional ring: drawing it raised a raw ValueError."""
    from trnsim.system.pictures import topology_picture
    assert topology_picture("inf2.48xlarge", tmp_path / "ring.png").stat().st_size > 1000


BUMP = '''
import numpy as np
import nki, nki.isa as nisa, nki.language as nl

@nki.jit
def bump(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=x, src=t)
    return x

a = np.zeros((4, 8), np.float32)
bump(a)
print("input after one launch:", a[0, 0])
'''


def test_ranks_do_not_share_an_input_the_kernel_writes(tmp_path, capsys):
    """Every rank wrote the caller's array: it ended at 4.0 after one launch on 4 ranks."""
    script = tmp_path / "bump.py"
    script.write_text(BUMP)
    assert main(["run", "--no-profile", "--ranks", "4", str(script)]) == 0
    assert "input after one launch: 1.0" in capsys.readouterr().out
