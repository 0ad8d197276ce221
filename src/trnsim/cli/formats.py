"""`trnsim formats`: every number format trnsim knows, with its figures.

    trnsim formats              # one table: bits, layout, max, min normal/subnormal, eps, Inf/NaN
    trnsim formats --mx         # also the MX block formats and their scale rules
    trnsim formats --json       # the same for scripts
"""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from trnsim.numerics import FORMATS, MX_FORMATS, SCALE_RULES, FloatFormat, IntFormat
from trnsim.numerics.mx import DEFAULT_BLOCK


def format_row(fmt: FloatFormat | IntFormat) -> dict:
    """The facts of one format as plain values (numbers stay numbers for --json)."""
    if isinstance(fmt, IntFormat):
        return {"name": fmt.name, "bits": fmt.bits, "layout": "signed int" if fmt.signed else "unsigned int",
                "bias": None, "max": fmt.max, "min_normal": None, "min_subnormal": None, "eps": None,
                "inf": False, "nan": False, "dtype": str(fmt.numpy_dtype)}
    sign = "S" if fmt.signed else "-"
    return {"name": fmt.name, "bits": fmt.bits, "layout": f"{sign}/E{fmt.exponent_bits}/M{fmt.mantissa_bits}",
            "bias": fmt.bias, "max": fmt.max, "min_normal": fmt.min_normal,
            "min_subnormal": fmt.min_subnormal if fmt.subnormals else None, "eps": fmt.eps,
            "inf": fmt.has_inf, "nan": fmt.has_nan,
            "dtype": str(fmt.numpy_dtype) + ("" if fmt.ml_dtypes_name else " (container)")}


def mx_row(name: str) -> dict:
    fmt = MX_FORMATS[name]
    return {"name": name, "element": fmt.element.name if fmt.element else "int8 (x 2^-6)",
            "max_element": fmt.max_element, "emax": fmt.emax, "block": DEFAULT_BLOCK,
            "scale": "float8_e8m0fnu"}


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render(rows: list[dict], title: str) -> Table:
    table = Table(title=title)
    for key in rows[0]:
        left = key in ("name", "layout", "dtype")
        table.add_column(key.replace("_", " "), justify="left" if left else "right")
    for row in rows:
        table.add_row(*(_cell(v) for v in row.values()))
    return table


def dtype_names(fmt: FloatFormat | IntFormat) -> dict:
    """Names of the same type in NKI, torch and ml_dtypes (None where there is none)."""
    return {"nki": fmt.nki_name, "torch": fmt.torch_name, "ml_dtypes": getattr(fmt, "ml_dtypes_name", None)}


def run(args) -> int:
    rows = [format_row(fmt) for fmt in FORMATS.values()]
    mx_rows = [mx_row(name) for name in MX_FORMATS] if args.mx else []
    if args.json:
        rows = [{**row, **dtype_names(fmt)} for row, fmt in zip(rows, FORMATS.values(), strict=True)]
        print(json.dumps({"formats": rows, "mx": mx_rows, "mx_scale_rules": list(SCALE_RULES)}, indent=2))
        return 0
    out = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    out.print(render(rows, "Number formats (min subnormal '-': none)"))
    if mx_rows:
        out.print(render(mx_rows, f"MX block formats (scale rules: {', '.join(SCALE_RULES)})"))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("formats", help="table of every number format",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--mx", action="store_true", help="also list the MX block formats")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)
