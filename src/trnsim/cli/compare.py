"""`trnsim compare A B ...`: instances (or chips) side by side, with derived cost figures.

    trnsim compare trn2.48xlarge p5.48xlarge trn1.32xlarge inf2.48xlarge
    trnsim compare trn2 trn3 trn4            # chips: no prices, announced ones labelled
    trnsim compare trn2.48xlarge p5.48xlarge --sources
    trnsim compare trn2.48xlarge p5.48xlarge --json

Figures: dense BF16 and FP8 PFLOPS, HBM size and TB/s, on-demand $/h, $ per BF16 PFLOPS-hour,
$ per TB/s-hour of HBM bandwidth, roofline ridge points (FLOP per HBM byte), HBM GiB per $/h.
"""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from trnsim import hardware
from trnsim.cli.specs import SourceNotes, add_common_options, add_plain_row, catalog_of, console, title_of
from trnsim.errors import SpecError
from trnsim.hardware.derived import FIGURES, Figure, figures
from trnsim.hardware.specs import citations


def resolve(catalog, name: str):
    """An instance if the name is one, else a chip; cores and cost tables are not compared here."""
    comparable = hardware.InstanceSpec | hardware.ChipSpec
    found = [spec for spec in catalog.find(name) if isinstance(spec, comparable)]
    if not found:
        raise SpecError(f"{name!r} names a NeuronCore generation or cost table, not a chip or instance",
                        hint="compare chips (trn2) or instances (trn2.48xlarge)")
    return found[0]


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit in ("$/h", "$"):
        return f"${value:,.2f}"
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def figure_cell(figure: Figure, notes: SourceNotes) -> str:
    """The figure, its note, "*" if any input has disagreeing sources, and the [keys] its inputs cite."""
    if figure.value is None:
        return figure.note or "—"
    marks = [notes.mark(sourced) for _, sourced in figure.inputs]
    star = "*" if any(mark.startswith("*") for mark in marks) else ""
    refs = "".join(f"[{key}]" for key in dict.fromkeys(key for mark in marks for key in citations(mark)))
    note = f" ({figure.note})" if figure.note else ""
    return f"{_number(figure.value, figure.unit)}{note}{star}{refs}"


def compare_table(specs, notes: SourceNotes) -> Table:
    table = Table(title="Side by side", title_justify="left")
    table.add_column("Figure", no_wrap=True)
    table.add_column("Unit")
    for spec in specs:
        table.add_column(title_of(spec), justify="right")
    all_figures = [figures(spec) for spec in specs]
    for key, rule in FIGURES.items():
        add_plain_row(table, rule.label, rule.unit, *(figure_cell(f[key], notes) for f in all_figures))
    return table


def as_json(specs) -> dict:
    """Columns and, per figure, each column's value, note and the sourced facts it rests on."""
    columns = [spec.name for spec in specs]
    result = {"columns": columns, "figures": {}}
    for spec in specs:
        for key, figure in figures(spec).items():
            entry = result["figures"].setdefault(key, {"label": figure.label, "unit": figure.unit,
                                                       "values": {}})
            entry["values"][spec.name] = {
                "value": figure.value, "note": figure.note or None,
                "announced": bool(getattr(spec, "announced", False)),
                "inputs": [{"field": field, "value": sourced.value, "source": sourced.source,
                            "date": sourced.date} for field, sourced in figure.inputs]}
    return result


def run(args: argparse.Namespace) -> int:
    catalog = catalog_of(args)
    specs = list({id(spec): spec for spec in (resolve(catalog, name) for name in args.names)}.values())
    if args.json:
        print(json.dumps(as_json(specs), indent=2, ensure_ascii=False))
        return 0
    out = console()
    notes = SourceNotes(args.sources, catalog)
    out.print(compare_table(specs, notes))
    notes.print(out)
    for spec in specs:
        if getattr(spec, "announced", False):
            out.print(f"{spec.name}: announced only — {spec.note}", markup=False, soft_wrap=True)
    out.print("Prices are on-demand at the date shown; * marks figures where sources "
              "disagree (--sources).", markup=False, soft_wrap=True)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("compare", help="instances or chips side by side with cost figures",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", metavar="NAME", help="instances (trn2.48xlarge) or chips (trn2)")
    add_common_options(parser)
    parser.set_defaults(run=run)
