"""`trnsim specs [NAME...]`: tables of cores, chips and instances from the hardware catalog.

    trnsim specs                      # summary tables of every core, chip and instance
    trnsim specs chips                # one kind only (cores, chips, instances)
    trnsim specs trn2 p5.48xlarge     # every fact of the named entries
    trnsim specs trn2 --sources       # ... with the source of each figure and other sources' values
    trnsim specs --sources            # summary tables citing [keys], then every document's title and URLs
    trnsim specs trn2 --json          # the same for scripts
    trnsim specs fabrics              # chip networks of multi-chip systems (trnsim.system)
    trnsim specs --topology trn2.48xlarge --picture topo.png   # one system's network, drawn
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trnsim import hardware
from trnsim.errors import ConfigError
from trnsim.hardware.catalog import Catalog, default_catalog
from trnsim.hardware.describe import KIND_OF, Row, row_map, rows, to_json
from trnsim.hardware.specs import Document, citations

KINDS = {"cores": "core", "chips": "chip", "instances": "instance", "fabrics": "fabric"}
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
    "fabric": (("Layout", "layout"), ("Torus", "torus_dims"), ("Chips/node", "chips_per_node"),
               ("Nodes", "nodes"), ("LNC", "default_lnc"), ("Links/chip", "links_per_chip"),
               ("Per link, 1 direction", "link_bytes_per_s"), ("Hop", "hop_latency_s"),
               ("Between nodes, per chip, 1 direction", "scaleup_bytes_per_s_per_chip"),
               ("EFA/node", "network_bytes_per_s_per_node"), ("EFA latency", "network_latency_s")),
}


def add_plain_row(table: Table, *cells: str) -> None:
    """Add a row whose text is shown as is: sources like "[isa stub]" must not be read as markup."""
    table.add_row(*(Text(text) for text in cells))


UNFOLDED_WIDTH = 10_000
"""Console width for a file or pipe: rich would otherwise assume 80 columns and fold table cells."""


def console(stderr: bool = False) -> Console:
    """Rich console: the terminal's width, or wide enough that a piped table keeps every cell whole."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(width=None if stream.isatty() else UNFOLDED_WIDTH, highlight=False, stderr=stderr)


class SourceNotes:
    """The documents cells cite, so that with --sources a list of titles and URLs follows the table."""

    def __init__(self, enabled: bool, catalog: Catalog | None = None):
        self.enabled = enabled
        self.catalog = catalog
        self.cited: dict[str, Document] = {}

    def mark(self, sourced) -> str:
        """Text to append to a cell: "*" when other sources disagree, then its keys ("[S4]")."""
        if sourced is None:
            return ""
        star = "*" if sourced.alternatives else ""
        if not self.enabled:
            return star
        self.cite(sourced)
        return star + "".join(f"[{key}]" for key in citations(sourced.source))

    def cite(self, sourced) -> None:
        """Remember the documents a fact and its alternatives cite, for the list under the table."""
        if self.enabled and sourced is not None:
            self.cited.update((doc.key, doc) for doc in self.catalog.documents_of(sourced))

    def cite_every_document(self) -> None:
        """List every document of the catalog, not only those the tables show (`specs --sources`)."""
        if self.enabled:
            self.cited = dict(self.catalog.documents)

    def print(self, out: Console) -> None:
        for document in self.cited.values():
            out.print(f"  [{document.key}] {document.title}: {' '.join(document.urls)}",
                      markup=False, soft_wrap=True)


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


NOT_APPLICABLE = "n/a: does not apply (a switch has no torus; a one-node system no links between nodes)"
"""The fabric table's legend for a field a system does not have."""


def summary_table(kind: str, specs, notes: SourceNotes) -> Table:
    caption = NOT_APPLICABLE if kind == "fabric" else None
    table = Table(title=f"{kind.capitalize()}s", title_justify="left", caption=caption,
                  caption_justify="left")
    table.add_column("Name", no_wrap=True)
    for header, _ in SUMMARY[kind]:
        table.add_column(header)
    for spec in specs:
        cells = row_map(spec)
        texts = [cell(cells.get(path), notes) for _, path in SUMMARY[kind]]
        if kind == "fabric":  # a fabric's missing field does not apply; it is not unpublished
            texts = ["n/a" if cells.get(path) is not None and cells[path].value is None else text
                     for text, (_, path) in zip(texts, SUMMARY[kind], strict=True)]
        add_plain_row(table, title_of(spec), *texts)
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
        notes.cite(row.sourced)
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
    catalog = catalog_of(args)
    if args.picture and not args.topology:
        raise ConfigError("--picture draws a --topology", hint="add --topology SYSTEM")
    if args.topology:
        if args.names:
            raise ConfigError(f"--topology shows one system; the names {args.names} would be ignored",
                              hint="run `trnsim specs NAME` separately")
        return show_topology(catalog, args)
    specs = selected(catalog, args.names)
    if args.json:
        print(json.dumps([to_json(spec) for spec in specs], indent=2, ensure_ascii=False))
        return 0
    out = console()
    detailed = bool(args.names) and not all(name.lower() in KINDS for name in args.names)
    notes = SourceNotes(args.sources, catalog)
    if detailed:
        for spec in specs:
            out.print(detail_table(spec, notes))
        notes.print(out)
        return 0
    for kind in ("core", "chip", "instance", "fabric"):
        chosen = [spec for spec in specs if KIND_OF[type(spec)] == kind]
        if chosen:
            out.print(summary_table(kind, chosen, notes))
    if not args.names:
        notes.cite_every_document()
    notes.print(out)
    out.print("* sources disagree: the chosen value is shown; --sources or `trnsim specs NAME --sources` "
              "lists the others.", markup=False, soft_wrap=True)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("specs", help="tables of NeuronCores, chips and instances",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="cores, chips, instances, or names such as trn2, Trainium2, trn2.48xlarge")
    parser.add_argument("--topology", metavar="SYSTEM", help="one system's chip network and hierarchy")
    parser.add_argument("--picture", metavar="PNG", help="with --topology: draw the network (matplotlib)")
    add_common_options(parser)
    parser.set_defaults(run=run)


def show_topology(catalog: Catalog, args: argparse.Namespace) -> int:
    """The chip network of one system, its rank hierarchy and the collective model's constants."""
    from trnsim.system import Machine, fabric

    spec = fabric(args.topology) if catalog is default_catalog() else catalog.fabric(args.topology)
    picture = None
    if args.picture:  # drawn first, and with --json too: stdout stays JSON, the picture is a file
        from trnsim.system.pictures import topology_picture

        picture = topology_picture(spec, args.picture)
    if args.json:
        print(json.dumps([to_json(spec), to_json(spec.model)], indent=2, ensure_ascii=False))
        return 0
    out = console()
    notes = SourceNotes(args.sources, catalog)
    out.print(detail_table(spec, notes))
    out.print(detail_table(spec.model, notes))
    machine = Machine(spec, spec.default_lnc)
    out.print(f"hierarchy: rank = logical core (LNC={machine.lnc}) -> chip of {machine.ranks_per_chip} "
              f"ranks -> node of {spec.chips_per_node} chips ({machine.ranks_per_node} ranks) -> system of "
              f"{spec.nodes} node(s) ({machine.ranks_per_system} ranks) -> systems joined by EFA",
              markup=False, soft_wrap=True)
    notes.print(out)
    if picture is not None:
        out.print(f"picture: {picture}", markup=False, soft_wrap=True)
    return 0


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """--sources, --json and --data, shared by `specs` and `compare`."""
    parser.add_argument("--sources", action="store_true", help="show where each number comes from")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--data", metavar="DIR", help="read the hardware catalog from DIR (an edited copy)")
