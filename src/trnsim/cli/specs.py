"""`trnsim specs [NAME...]`: tables of cores, chips and instances from the hardware catalog.

    trnsim specs                      # summary tables of every core, chip and instance
    trnsim specs chips                # one kind only (cores, chips, instances)
    trnsim specs trn2 p5.48xlarge     # every fact of the named entries
    trnsim specs trn2 --sources       # ... with the source of each figure and other sources' values
    trnsim specs trn2 --json          # the same for scripts
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trnsim import hardware
from trnsim.hardware.catalog import Catalog, default_catalog
from trnsim.hardware.describe import KIND_OF, Row, row_map, rows, to_json

KINDS = {"cores": "core", "chips": "chip", "instances": "instance"}
"""Words that select a whole kind of entry."""

SUMMARY = {
    "core": (("Aliases", "aliases"), ("Partitions", "partitions"),
             ("SBUF/partition", "sbuf_bytes_per_partition"), ("PSUM/partition", "psum_bytes_per_partition"),
             ("Tensor clock", "engines.tensor.clock_hz"), ("Vector clock", "engines.vector.clock_hz"),
             ("DMA/queue", "dma_bytes_per_s_per_queue"), ("BF16/core", "peak_flops.bf16")),
    "chip": (("Aliases", "aliases"), ("Core", "core"), ("Cores", "cores"), ("BF16", "peak_flops.bf16"),
             ("FP8", "peak_flops.fp8"), ("MXFP8", "peak_flops.mxfp8"), ("HBM", "hbm_bytes"),
             ("HBM BW", "hbm_bytes_per_s"), ("Link/chip", "link_bytes_per_s")),
    "instance": (("Kind", "kind"), ("Accelerator", "accelerator"), ("Count", "accelerators"),
                 ("BF16", "peak_flops.bf16"), ("FP8", "peak_flops.fp8"), ("MXFP8", "peak_flops.mxfp8"),
                 ("HBM", "hbm_bytes"), ("HBM BW", "hbm_bytes_per_s"), ("Network", "network_bytes_per_s"),
                 ("On-demand", "usd_per_hour")),
}


def add_plain_row(table: Table, *cells: str) -> None:
    """Add a row whose text is shown as is: sources like "[isa stub]" must not be read as markup."""
    table.add_row(*(Text(text) for text in cells))


def console() -> Console:
    """Rich console; wide when output is not a terminal so piped tables are not folded."""
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


class SourceNotes:
    """Numbers each distinct source once, so cells can carry [n] and a list follows the table."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.numbers: dict[str, int] = {}

    def mark(self, sourced) -> str:
        """Text to append to a cell: "[n]" for its source, "*" when other sources disagree."""
        if sourced is None:
            return ""
        star = "*" if sourced.alternatives else ""
        if not self.enabled:
            return star
        number = self.numbers.setdefault(sourced.source, len(self.numbers) + 1)
        return f"{star}[{number}]"

    def print(self, out: Console) -> None:
        if self.enabled:
            for source, number in self.numbers.items():
                out.print(f"  [{number}] {source}", markup=False)


def title_of(spec) -> str:
    """The entry's name with its status: announced entries are never shown as measured."""
    if getattr(spec, "announced", False):
        return f"{spec.name} (announced)"
    return f"{spec.name} (partial)" if getattr(spec, "partial", False) else spec.name


def cell(row: Row | None, notes: SourceNotes) -> str:
    if row is None:
        return "—"
    date = f" ({row.sourced.date})" if row.sourced is not None and row.sourced.date else ""
    return f"{row.text}{date}{notes.mark(row.sourced)}"


def summary_table(kind: str, specs, notes: SourceNotes) -> Table:
    table = Table(title=f"{kind.capitalize()}s", title_justify="left")
    table.add_column("Name", no_wrap=True)
    for header, _ in SUMMARY[kind]:
        table.add_column(header)
    for spec in specs:
        cells = row_map(spec)
        add_plain_row(table, title_of(spec), *(cell(cells.get(path), notes) for _, path in SUMMARY[kind]))
    return table


def provenance(sourced) -> tuple[str, str]:
    """(source with its note, the other sources' values) of one fact, for --sources."""
    if sourced is None:
        return "", ""
    source = f"{sourced.source}: {sourced.note}" if sourced.note else sourced.source
    others = "; ".join(f"{alt.written or alt.value} ({alt.source}{': ' + alt.note if alt.note else ''})"
                       for alt in sourced.alternatives)
    return source, others


def detail_table(spec, notes: SourceNotes) -> Table:
    table = Table(title=Text(f"{KIND_OF[type(spec)]} {title_of(spec)}"), title_justify="left")
    for header in ("Field", "Value", *(("Source", "Other sources") if notes.enabled else ())):
        table.add_column(header, overflow="fold")
    for row in rows(spec):
        extra = provenance(row.sourced) if notes.enabled else ()
        add_plain_row(table, row.path, cell(row, SourceNotes(False)), *extra)
    return table


def catalog_of(args: argparse.Namespace) -> Catalog:
    """The package catalog, or the one under --data (to check an edited copy of the data)."""
    return hardware.load(args.data) if args.data else default_catalog()


def selected(catalog: Catalog, names: list[str]) -> list:
    """The specs the names ask for, in order, without repeats; a kind word selects all of it."""
    found = []
    for name in names or list(KINDS):
        if name.lower() in KINDS:
            found.extend(catalog.entries[KINDS[name.lower()]].values())
        else:
            found.extend(catalog.find(name))
    return list({id(spec): spec for spec in found}.values())


def run(args: argparse.Namespace) -> int:
    specs = selected(catalog_of(args), args.names)
    if args.json:
        print(json.dumps([to_json(spec) for spec in specs], indent=2, ensure_ascii=False))
        return 0
    out = console()
    detailed = bool(args.names) and not all(name.lower() in KINDS for name in args.names)
    notes = SourceNotes(args.sources)
    if detailed:
        for spec in specs:
            out.print(detail_table(spec, notes))
        return 0
    for kind in ("core", "chip", "instance"):
        chosen = [spec for spec in specs if KIND_OF[type(spec)] == kind]
        if chosen:
            out.print(summary_table(kind, chosen, notes))
    notes.print(out)
    out.print("* sources disagree: the chosen value is shown; --sources or `trnsim specs NAME --sources` "
              "lists the others.", markup=False)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("specs", help="tables of NeuronCores, chips and instances",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="cores, chips, instances, or names such as trn2, Trainium2, trn2.48xlarge")
    add_common_options(parser)
    parser.set_defaults(run=run)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """--sources, --json and --data, shared by `specs` and `compare`."""
    parser.add_argument("--sources", action="store_true", help="show where each number comes from")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--data", metavar="DIR", help="read the hardware catalog from DIR (an edited copy)")
