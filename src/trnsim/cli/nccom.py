"""`trnsim nccom`: a look-alike of Neuron's nccom-test whose times are PREDICTIONS of
trnsim.system's collective model, not measurements; no hardware is needed.

    trnsim nccom -r 64 -b 8K -e 1G -f 2 --op all_reduce --instance trn2.48xlarge
    trnsim nccom allg -r 16 -b 1K -e 1M -f 8 -d fp32 --show-algorithm
    trnsim nccom allr -r 128 -N 2 --json               # two trn2.48xlarge over EFA
    trnsim nccom allr -r 16 --custom-replica-groups groups.json --report-to-json-file out.json
    trnsim nccom sendrecv -r 2 -N 2                  # also alltoallv, allgv (timed as even counts)
    trnsim nccom allr -r 64 -b 8K -e 1G -f 4 --plot busbw.png --plot-ranks 4,16,64

Columns and JSON are nccom-test's: size(B) count(elems) type time:avg(us) algbw(GB/s)
busbw(GB/s) [algorithm], then "Avg bus bandwidth". Bandwidths are decimal GB/s (10^9 B/s).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from trnsim import system
from trnsim.cli import count
from trnsim.errors import ConfigError
from trnsim.system.collectives import dtype_bytes, operation
from trnsim.timing.perfetto import write_atomic

TARGETS = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "Trn3 Gen1 UltraServer"}
"""The system `--target` picks for a generation."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from nccom-test's size forms: 4096, 8K, 1G, 2kb, 1MB (K, M, G, T are powers of 1024)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(f"not a size in bytes: {text!r}", hint="e.g. 4096, 8K, 32M, 1G, 2kb")
    number, unit = float(match.group(1)), match.group(2).lower()
    value = number * 1024 ** "_kmgt".index(unit) if unit else number
    if not value.is_integer() or value < 0:
        raise ConfigError(f"a size must be a whole number of bytes, got {text!r}")
    return int(value)


def size_argument(text: str) -> int:
    """`parse_size` as an argparse type: a bad size is the option's usage error, in parse_size's words."""
    try:
        return parse_size(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).splitlines()[0]) from None


def sizes(minbytes: int, maxbytes: int, stepbytes: int | None, stepfactor: float | None) -> list[int]:
    """The benchmark's sizes from -b to -e by -f (a factor) or -i (bytes; default a tenth)."""
    if minbytes > maxbytes:
        raise ConfigError(f"-b {minbytes} is above -e {maxbytes}")
    if stepfactor is not None:
        if not math.isfinite(stepfactor) or stepfactor <= 1:
            raise ConfigError(f"-f must be a finite number above 1, got {stepfactor}")
        found, size = [], minbytes
        while size <= maxbytes:
            found.append(size)
            if len(found) > MAX_SIZES:
                raise ConfigError(f"-b {minbytes} -e {maxbytes} -f {stepfactor} makes over {MAX_SIZES:,} "
                                  f"sizes; trnsim prints at most {MAX_SIZES:,}", hint="use a larger -f")
            size = int(size * stepfactor)
            if size == found[-1]:
                raise ConfigError(f"-f {stepfactor} does not grow size {size}")
        return found
    step = stepbytes if stepbytes is not None else max((maxbytes - minbytes) // 10, 1)
    if step <= 0:
        raise ConfigError(f"-i must be positive, got {step}")
    found = range(minbytes, maxbytes + 1, step)
    if len(found) > MAX_SIZES:
        raise ConfigError(f"-b {minbytes} -e {maxbytes} -i {step} makes {len(found):,} sizes; "
                          f"trnsim prints at most {MAX_SIZES:,}", hint="use a larger -i, or -f")
    return list(found)


MAX_SIZES = 10_000
"""Sizes one run prints at most: each is a table row."""


def instance_of(args: argparse.Namespace) -> str:
    if args.target is not None:
        if args.instance is not None:
            raise ConfigError(f"--target {args.target} and --instance {args.instance} both name the system",
                              hint="give one")
        if args.target not in TARGETS:
            raise ConfigError(f"unknown --target {args.target!r}", hint=f"one of {', '.join(TARGETS)}")
        return TARGETS[args.target]
    return args.instance or DEFAULT_INSTANCE


DEFAULT_INSTANCE = "trn2.48xlarge"


def replica_groups(args: argparse.Namespace) -> list[list[int]] | None:
    """--custom-replica-groups: a JSON file with a list of rank lists (or {"replica_groups": ...})."""
    if args.custom_replica_groups is None:
        return None
    try:
        data = json.loads(Path(args.custom_replica_groups).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read replica groups from {args.custom_replica_groups}: {error}") from None
    groups = data.get("replica_groups", data) if isinstance(data, dict) else data
    if not (isinstance(groups, list) and groups and all(isinstance(g, list) and g for g in groups)
            and all(type(rank) is int for group in groups for rank in group)):
        raise ConfigError("--custom-replica-groups must hold a non-empty list of lists of integer ranks")
    if args.nnodes is not None:
        raise ConfigError("-N and --custom-replica-groups both place the ranks",
                          hint="give one: the groups' ranks are placed as the instance numbers them")
    ranks = sorted(rank for group in groups for rank in group)
    if ranks != list(range(args.nworkers)) or len({len(g) for g in groups}) != 1:
        raise ConfigError(f"replica groups must split ranks 0..{args.nworkers - 1} into groups of one size")
    return groups


def results(args: argparse.Namespace) -> list[dict]:
    """One nccom-test result row per size; all replica groups run at once, so the slowest counts."""
    op, instance = operation(args.op), instance_of(args)
    type_name, element = dtype_bytes(args.datatype)
    groups = replica_groups(args) or [None]
    rows = []
    maxbytes = args.maxbytes if args.maxbytes is not None else max(args.minbytes, parse_size("32M"))
    requested = sizes(args.minbytes, maxbytes, args.stepbytes, args.stepfactor)
    for size in whole_elements(requested, element)[0]:
        times = [system.collective_time(op, size, len(group) if group else args.nworkers, instance,
                                        type_name, args.algorithm, lnc=args.lnc,
                                        nodes=None if group else args.nnodes, group=group)
                 for group in groups]
        slowest = max(times, key=lambda t: t.seconds)
        rows.append({"size(B)": size, "count(elems)": size // element, "type": args.datatype,
                     "time:avg(us)": round(slowest.seconds * 1e6, 2), "algbw(GB/s)": slowest.algbw,
                     "busbw(GB/s)": slowest.busbw, "algorithm": slowest.algorithm})
    return rows


def whole_elements(found: list[int], element: int) -> tuple[list[int], int]:
    """The sizes rounded down to whole elements (a size below one element up to one element, 0 kept),
    each printed once, and how many requested sizes were merged into another row by the rounding."""
    rounded = [size - size % element if size >= element or size == 0 else element for size in found]
    unique = list(dict.fromkeys(rounded))
    return unique, len(found) - len(unique)


def rounding_note(args: argparse.Namespace) -> str | None:
    """Says when the rounding to whole elements merged requested sizes (None when it did not)."""
    _, element = dtype_bytes(args.datatype)
    maxbytes = args.maxbytes if args.maxbytes is not None else max(args.minbytes, parse_size("32M"))
    _, merged = whole_elements(sizes(args.minbytes, maxbytes, args.stepbytes, args.stepfactor), element)
    if not merged:
        return None
    return (f"{merged} requested size(s) fell on the same whole number of {element}-byte {args.datatype} "
            f"elements as another (sizes round down to whole elements, up to one element) "
            f"and are printed once")


COLUMNS = ("size(B)", "count(elems)", "type", "time:avg(us)", "algbw(GB/s)", "busbw(GB/s)")


def table(rows: list[dict], show_algorithm: bool) -> str:
    """nccom-test's text table, right-aligned columns, then the average bus bandwidth."""
    columns = [*COLUMNS, "algorithm"] if show_algorithm else list(COLUMNS)
    cells = [[_cell(row[column]) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells)) + 4 for i, column in enumerate(columns)]
    lines = ["".join(column.rjust(width) for column, width in zip(columns, widths, strict=True))]
    lines += ["".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in cells]
    average = sum(row["busbw(GB/s)"] for row in rows) / len(rows)
    lines.append(f"Avg bus bandwidth:\t{average:.4f}GB/s")
    return "\n".join(lines)


def _cell(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def report(args: argparse.Namespace, rows: list[dict]) -> dict:
    """nccom-test's JSON ({"results": [...]}) with the run's configuration and a prediction note."""
    keep = [*COLUMNS, "algorithm"] if args.show_algorithm else list(COLUMNS)
    note = rounding_note(args)
    return {"prediction": "times are trnsim model predictions, not measurements",
            **({"note": note} if note else {}),
            "config": {"operation": operation(args.op), "nworkers": args.nworkers, "nnodes": args.nnodes,
                       "instance": instance_of(args), "datatype": args.datatype, "lnc": args.lnc},
            "results": [{key: row[key] for key in keep} for row in rows]}


def plot(args: argparse.Namespace, rows: list[dict]) -> None:
    """--plot: busbw against size for the table's configuration (instance, -N, --lnc, --algorithm,
    replica groups, dtype): the table's own rows, and the same run at each other --plot-ranks."""
    from trnsim.system.pictures import busbw_plot

    counts = args.plot_ranks or [args.nworkers]
    if args.custom_replica_groups is not None and set(counts) != {args.nworkers}:
        raise ConfigError("--plot-ranks with --custom-replica-groups: the groups fix the rank count",
                          hint=f"plot only -r {args.nworkers}, or drop the groups")
    series = {}
    for ranks in counts:
        other = argparse.Namespace(**{**vars(args), "nworkers": ranks})
        found = rows if ranks == args.nworkers else results(other)
        series[f"{ranks} ranks"] = [(row["size(B)"], row["busbw(GB/s)"]) for row in found]
    setting = [f"{operation(args.op)} on {instance_of(args)} ({args.datatype})"]
    setting += [f"-N {args.nnodes}"] if args.nnodes is not None else []
    setting += [f"LNC={args.lnc}"] if args.lnc is not None else []
    setting += [f"algorithm {args.algorithm}"] if args.algorithm is not None else []
    setting += ["custom replica groups"] if args.custom_replica_groups is not None else []
    busbw_plot(series, ", ".join(setting) + ": trnsim prediction", args.plot)


def _rank_list(text: str) -> list[int]:
    """--plot-ranks: comma-separated rank counts, each at least 1."""
    return [count()(part) for part in text.split(",")]


def run(args: argparse.Namespace) -> int:
    if args.op is None:
        raise ConfigError("name the collective: e.g. `trnsim nccom allr -r 16` or --op all_reduce")
    if any(stat != "avg" for stat in args.stats):
        raise ConfigError("trnsim predicts one time per size: --stats takes only avg",
                          hint="percentiles need measured runs")
    rows = results(args)
    document = report(args, rows)
    if args.plot:  # drawn first: a picture it cannot write leaves no JSON report behind either
        plot(args, rows)
    if args.report_to_json_file:
        write_atomic(args.report_to_json_file, json.dumps(document, indent=4) + "\n")
    if args.json:
        print(json.dumps(document, indent=4))
    else:
        print(table(rows, args.show_algorithm))
        if document.get("note"):
            print(f"({document['note']})")
        print("(predicted by trnsim's collective model, not measured)")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("nccom", help="nccom-test look-alike: predicted collective times",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("op_positional", nargs="?", metavar="OPERATION",
                        help="all_reduce/allr, all_gather/allg, reduce_scatter/redsct, alltoall, permute")
    parser.add_argument("--op", dest="op_flag", help="the operation (instead of the positional)")
    parser.add_argument("-r", "--nworkers", type=int, required=True, help="ranks (logical cores)")
    parser.add_argument("-N", "--nnodes", type=int, default=None, help="nodes the ranks spread over")
    parser.add_argument("-b", "--minbytes", type=size_argument, default=parse_size("32M"))
    parser.add_argument("-e", "--maxbytes", type=size_argument, default=None, help="default: 32M or -b")
    parser.add_argument("-i", "--stepbytes", type=size_argument, default=None)
    parser.add_argument("-f", "--stepfactor", type=float, default=None)
    parser.add_argument("-d", "--datatype", default="uint8", help="uint8 (default), fp8, fp16, bf16, fp32")
    parser.add_argument("-n", "--iters", type=int, default=20, help="accepted; no effect on predictions")
    parser.add_argument("-w", "--warmup_iters", type=int, default=5, help="accepted, as -n")
    parser.add_argument("-t", "--stats", nargs="+", default=["avg"], help="avg only")
    parser.add_argument("--show-algorithm", action="store_true")
    parser.add_argument("--report-to-json-file", metavar="FILE")
    parser.add_argument("--custom-replica-groups", metavar="FILE", help="JSON list of rank lists")
    parser.add_argument("--instance", help=f"system (default {DEFAULT_INSTANCE})")
    parser.add_argument("--target", help="a generation instead: trn1, trn2 or trn3")
    parser.add_argument("--lnc", type=int, default=None, help="logical core size (default: the system's)")
    parser.add_argument("--algorithm", default=None, help="force one: mesh, mesh1, ring, kangaring, rdh")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    parser.add_argument("--plot", metavar="PNG", help="draw busbw against size")
    parser.add_argument("--plot-ranks", metavar="LIST", type=_rank_list,
                        help="rank counts to plot, e.g. 4,16,64")
    parser.set_defaults(run=_run_with_op)


def _run_with_op(args: argparse.Namespace) -> int:
    if args.op_flag and args.op_positional and operation(args.op_flag) != operation(args.op_positional):
        raise ConfigError(f"two collectives named: {args.op_positional!r} and --op {args.op_flag!r}",
                          hint="name one")
    if args.plot_ranks and not args.plot:
        raise ConfigError("--plot-ranks without --plot draws nothing", hint="add --plot FILE.png")
    args.op = args.op_flag or args.op_positional
    return run(args)
