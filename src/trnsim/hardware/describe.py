"""Flat, printable views of specs: one row per fact, with its display text and provenance.

Used by `trnsim specs` (tables, `--sources`, `--json`); kept here because it reads the schema
(field metadata) that only the hardware package knows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from trnsim.hardware.specs import (
    ChipSpec,
    CollectiveModelSpec,
    CoreSpec,
    CostSpec,
    FabricSpec,
    InstanceSpec,
    Sourced,
)
from trnsim.hardware.units import format_value

KIND_OF = {CoreSpec: "core", ChipSpec: "chip", InstanceSpec: "instance", CostSpec: "cost_table",
           FabricSpec: "fabric", CollectiveModelSpec: "collective_model"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One fact of a spec: dotted path ("engines.tensor.clock_hz"), SI value, text, provenance."""

    path: str
    value: object
    text: str
    sourced: Sourced | None = None


def rows(spec, prefix: str = "") -> Iterator[Row]:
    """Every field of `spec` in schema order; mappings and sub-specs are flattened with dots."""
    for spec_field in fields(spec):
        name, meta = spec_field.name, spec_field.metadata
        value = getattr(spec, name)
        if name in ("name", "sources"):
            continue
        path = f"{prefix}{name}"
        if meta["kind"] == "facts":
            for key, item in value.items():
                sourced = spec.sources[f"{name}.{key}"]
                yield Row(path=f"{path}.{key}", value=item, sourced=sourced,
                          text=sourced.written or format_value(item, meta["dimension"]))
        elif meta["kind"] == "nested_map":
            for key, sub in value.items():
                yield from rows(sub, f"{path}.{key}.")
        elif meta["kind"] == "reference":
            yield Row(path=path, value=None if value is None else value.name,
                      text="—" if value is None else value.name)
        elif meta["kind"] == "fact":
            sourced = spec.sources.get(name)
            text = sourced.written if sourced and sourced.written else _fact_text(value, meta["dimension"])
            yield Row(path=path, value=value, sourced=sourced, text=text)
        elif value not in ("", (), None):
            yield Row(path=path, value=value, text=_plain_text(value))


def _fact_text(value: object, dimension: str) -> str:
    if value is None:
        return "not published"
    return format_value(value, dimension)


def _plain_text(value: object) -> str:
    if isinstance(value, tuple):
        return ", ".join(value)
    return str(value)


def to_json(spec) -> dict:
    """A JSON-ready description: kind, name, and each fact with value, source and alternatives."""
    facts = {}
    for row in rows(spec):
        entry: dict[str, object] = {"value": _jsonable(row.value), "text": row.text}
        if row.sourced is not None:
            entry.update(source=row.sourced.source, written=row.sourced.written or None,
                         note=row.sourced.note or None, date=row.sourced.date,
                         alternatives=[{"value": _jsonable(a.value), "source": a.source,
                                        "written": a.written or None, "note": a.note or None}
                                       for a in row.sourced.alternatives])
        facts[row.path] = entry
    return {"kind": KIND_OF[type(spec)], "name": spec.name, "facts": facts}


def row_map(spec) -> dict[str, Row]:
    """rows(spec) keyed by path, for looking up single cells."""
    return {row.path: row for row in rows(spec)}


def _jsonable(value: object) -> object:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value
