"""Reading the TOML data files into specs, checking every entry against the dataclass schema.

Every complaint is a SpecError naming the file, the entry, the field and what is wrong, e.g.
``chips.toml: [Trainium2] hbm_bytes_per_s: must be positive, got -2.9``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from types import MappingProxyType

import tomli

from trnsim.errors import SpecError
from trnsim.hardware.specs import EMPTY, SPEC_CLASSES, Alternative, Document, Sourced, citations
from trnsim.hardware.units import INTEGRAL, UNITS, to_si

_SOURCED_KEYS = frozenset({"value", "unit", "source", "note", "date", "alternatives"})
_ALTERNATIVE_KEYS = frozenset({"value", "unit", "source", "note"})
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
_DOCUMENT_KEYS = frozenset({"title", "urls", "path", "note"})
_URL = re.compile(r"^https?://\S+$")
_NON_NEGATIVE = frozenset({"cycles"})


class Where:
    """Where in the data a value sits, for error messages: file, entry path, field."""

    def __init__(self, file: str, entry: str, field: str = ""):
        self.file, self.entry, self.field = file, entry, field

    def at(self, field: str) -> Where:
        return Where(self.file, self.entry, f"{self.field}.{field}" if self.field else field)

    def inside(self, key: str) -> Where:
        """The same file, one level down: a sub-spec such as an engine."""
        path = f"{self.entry}.{self.field}.{key}" if self.field else f"{self.entry}.{key}"
        return Where(self.file, path)

    def fail(self, problem: str, hint: str | None = None) -> SpecError:
        field = f" {self.field}" if self.field else ""
        return SpecError(f"{self.file}: [{self.entry}]{field}: {problem}", hint=hint)


def read_toml(path: Path) -> dict:
    """Parse one data file; a syntax error names the file and line. tomli, not the standard
    library's tomllib (the same parser): its compiled wheels parse the catalog 3x faster, and
    every trnsim process reads it."""
    try:
        with path.open("rb") as handle:
            return tomli.load(handle)
    except FileNotFoundError:
        raise SpecError(f"hardware data file {path} is missing") from None
    except OSError as error:
        raise SpecError(f"cannot read hardware data file {path}: {error.strerror}") from None
    except tomli.TOMLDecodeError as error:
        raise SpecError(f"{path.name}: not valid TOML: {error}") from None


def _number(raw: object, unit: str | None, dimension: str, where: Where) -> tuple[object, str]:
    """SI value of a numeric figure, checked for type, unit, sign and integrality."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise where.fail(f"expected a number, got {type(raw).__name__} {raw!r}")
    if not math.isfinite(raw):
        raise where.fail(f"must be a finite number, got {raw}")
    written = ""
    value: object = raw
    if unit is not None:
        if unit not in UNITS:
            raise where.fail(f"unknown unit {unit!r}", hint=f"known units: {', '.join(UNITS)}")
        unit_dimension, _ = UNITS[unit]
        if unit_dimension != dimension:
            raise where.fail(f"unit {unit!r} measures {unit_dimension}, this field measures {dimension}")
        _, value = to_si(raw, unit)
        written = f"{raw} {unit}"
    if dimension in _NON_NEGATIVE and value < 0:
        raise where.fail(f"must not be negative, got {raw}")
    if dimension not in _NON_NEGATIVE and value <= 0:
        raise where.fail(f"must be positive, got {raw}")
    if dimension in INTEGRAL:
        if isinstance(value, float) and not value.is_integer():
            raise where.fail(f"must be a whole number of {dimension}, got {raw}")
        return int(value), written
    return float(value), written


def _value(raw: dict, dimension: str, where: Where) -> tuple[object, str]:
    """The SI value of a `{ value = ..., unit = ... }` table for a field of `dimension`."""
    if "value" not in raw:
        raise where.fail("missing value")
    value, unit = raw["value"], raw.get("unit")
    if dimension == "text":
        if not isinstance(value, str) or not value.strip():
            raise where.fail(f"expected a non-empty text, got {value!r}")
        return value, ""
    if dimension == "names":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise where.fail(f"expected a non-empty list of names, got {value!r}")
        return frozenset(value), ""
    if dimension == "counts":
        if not isinstance(value, list) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            raise where.fail(f"expected a non-empty list of positive whole numbers, got {value!r}")
        return tuple(value), ""
    return _number(value, unit, dimension, where)


def _check_keys(raw: dict, allowed: frozenset[str], where: Where) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise where.fail(f"unknown key {unknown[0]!r}", hint=f"allowed: {', '.join(sorted(allowed))}")


Resolver = Callable[[str, str, Where], object]
"""(kind of entry, name, where) -> the spec (or document) it names; raises SpecError if there is none."""


def _source_text(raw: dict, where: Where, resolve: Resolver) -> str:
    """The source text, once every document key it cites is known (sources.toml)."""
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise where.fail("missing source", hint='every figure needs source = "[KEY] detail"')
    keys = citations(source)
    if not keys:
        raise where.fail(f"source {source!r} cites no document",
                         hint="start it with a key of sources.toml in brackets, e.g. [S4]")
    for key in keys:
        resolve("document", key, where)
    return source


def load_documents(path: Path) -> dict[str, Document]:
    """The public documents of sources.toml by key, each with a title and at least one URL."""
    documents = {}
    for key, raw in read_toml(path).items():
        where = Where(path.name, key)
        if not isinstance(raw, dict):
            raise where.fail(f"expected a table with title and urls, got {raw!r}")
        _check_keys(raw, _DOCUMENT_KEYS, where)
        title, urls = raw.get("title"), raw.get("urls")
        if not isinstance(title, str) or not title.strip():
            raise where.at("title").fail("missing title")
        if not (isinstance(urls, list) and urls and all(isinstance(u, str) and _URL.match(u) for u in urls)):
            raise where.at("urls").fail(f"expected a list of http(s) URLs, got {urls!r}")
        documents[key] = Document(key=key, title=title, urls=tuple(urls), path=str(raw.get("path", "")),
                                  note=str(raw.get("note", "")))
    return documents


def sourced(raw: object, dimension: str, where: Where, resolve: Resolver) -> Sourced:
    """One fact from its `{ value, source, [unit, note, date, alternatives] }` table."""
    if not isinstance(raw, dict):
        raise where.fail(f"{raw!r} has no source",
                         hint='write it as { value = ..., source = "[KEY] detail" }')
    _check_keys(raw, _SOURCED_KEYS, where)
    value, written = _value(raw, dimension, where)
    date = raw.get("date")
    if dimension == "usd_per_hour" and (not isinstance(date, str) or not _DATE.match(date)):
        raise where.fail(f"a price needs date = \"YYYY-MM[-DD]\", got {date!r}")
    alternatives = raw.get("alternatives", [])
    if not isinstance(alternatives, list):
        raise where.fail("alternatives must be a list of { value, source, note } tables")
    return Sourced(value=value, source=_source_text(raw, where, resolve), note=str(raw.get("note", "")),
                   written=written, date=date,
                   alternatives=tuple(_alternative(alt, dimension, where.at(f"alternatives[{i}]"), resolve)
                                      for i, alt in enumerate(alternatives)))


def _alternative(raw: object, dimension: str, where: Where, resolve: Resolver) -> Alternative:
    if not isinstance(raw, dict):
        raise where.fail(f"expected a {{ value, source, note }} table, got {raw!r}")
    _check_keys(raw, _ALTERNATIVE_KEYS, where)
    value, written = _value(raw, dimension, where)
    return Alternative(value=value, source=_source_text(raw, where, resolve), note=str(raw.get("note", "")),
                       written=written)


def _plain(raw: object, kind: str, where: Where) -> object:
    expected = {"text": str, "int": int, "flag": bool}
    if kind == "texts":
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise where.fail(f"expected a list of names, got {raw!r}")
        return tuple(raw)
    if not isinstance(raw, expected[kind]) or (kind == "int" and isinstance(raw, bool)):
        raise where.fail(f"expected {expected[kind].__name__}, got {raw!r}")
    return raw


def build(cls_name: str, name: str, raw: object, where: Where, resolve: Resolver) -> object:
    """A spec object of class `cls_name` called `name` from its table, every field checked."""
    cls = SPEC_CLASSES[cls_name]
    if not isinstance(raw, dict):
        raise where.fail(f"expected a table, got {raw!r}")
    schema = [f for f in fields(cls) if f.name not in ("name", "sources")]
    _check_keys(raw, frozenset(f.name for f in schema), where)
    partial = bool(raw.get("partial")) or bool(raw.get("announced"))
    values: dict[str, object] = {"name": name}
    sources: dict[str, Sourced] = {}
    for spec_field in schema:
        meta, here = spec_field.metadata, where.at(spec_field.name)
        if spec_field.name not in raw:
            if not (meta["optional"] or partial or spec_field.default is not MISSING):
                raise here.fail("missing field")
            values[spec_field.name] = _absent(spec_field)
            continue
        values[spec_field.name] = _field(raw[spec_field.name], meta, here, sources, resolve)
    return cls(**values, sources=MappingProxyType(sources))


def _absent(spec_field) -> object:
    """The value of a field an entry leaves out: its default, else empty or None."""
    if spec_field.default is not MISSING:
        return spec_field.default
    return EMPTY if spec_field.metadata["kind"] in ("facts", "nested_map") else None


def _field(raw: object, meta: Mapping, where: Where, sources: dict, resolve: Resolver) -> object:
    kind = meta["kind"]
    if kind == "fact":
        sources[where.field] = sourced(raw, meta["dimension"], where, resolve)
        return sources[where.field].value
    if kind == "facts":
        return _facts(raw, meta, where, sources, resolve)
    if kind == "nested_map":
        if not isinstance(raw, dict):
            raise where.fail(f"expected a table of {meta['cls']} entries, got {raw!r}")
        return MappingProxyType({key: build(meta["cls"], key, sub, where.inside(key), resolve)
                                 for key, sub in raw.items()})
    if kind == "reference":
        if not isinstance(raw, str):
            raise where.fail(f"expected the name of a {meta['target']}, got {raw!r}")
        return resolve(meta["target"], raw, where)
    return _plain(raw, kind, where)


def _facts(raw: object, meta: Mapping, where: Where, sources: dict, resolve: Resolver) -> Mapping:
    if not isinstance(raw, dict) or not raw:
        raise where.fail(f"expected a table of sourced {meta['dimension']} figures, got {raw!r}")
    keys = meta["keys"]
    result = {}
    for key, item in raw.items():
        if keys is not None and key not in keys:
            raise where.at(key).fail(f"unknown key {key!r}", hint=f"allowed: {', '.join(sorted(keys))}")
        sources[f"{where.field}.{key}"] = sourced(item, meta["dimension"], where.at(key), resolve)
        result[key] = sources[f"{where.field}.{key}"].value
    return MappingProxyType(result)
