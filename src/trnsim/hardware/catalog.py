"""The hardware catalog: load the data files once, then look entries up by forgiving names.

Names match case-insensitively, ignoring spaces, '-' and '_' ("trainium 2" and "TRAINIUM-2" find
"Trainium2"), and each entry lists aliases ("trn2"). An unknown name raises SpecError with the
closest known names.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from trnsim.errors import SpecError
from trnsim.hardware import snapshot
from trnsim.hardware.loader import Where, build, load_documents, read_toml
from trnsim.hardware.specs import (
    ChipSpec,
    CoreSpec,
    CostSpec,
    Document,
    FabricSpec,
    InstanceSpec,
    Sourced,
    citations,
)

DATA_DIR = Path(__file__).resolve().parent / "data"
DOCUMENTS_FILE = "sources.toml"
"""The public documents that every figure's source cites by key."""

# kind of entry -> (data file, spec class), in load order: each kind may name the kinds before it.
KINDS = {
    "cost_table": ("costs.toml", "CostSpec"),
    "core": ("cores.toml", "CoreSpec"),
    "chip": ("chips.toml", "ChipSpec"),
    "instance": ("instances.toml", "InstanceSpec"),
    "collective_model": ("collectives.toml", "CollectiveModelSpec"),
    "fabric": ("fabrics.toml", "FabricSpec"),
}


def normalize(name: str) -> str:
    """The form names are compared in: lower case, without spaces, '-' or '_'."""
    return "".join(ch for ch in name.lower() if ch not in " -_")


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """Every entry of the data files, by kind, with a name index per kind, and the cited documents."""

    data_dir: Path
    entries: Mapping[str, Mapping[str, object]]
    index: Mapping[str, Mapping[str, str]]
    documents: Mapping[str, Document]

    def get(self, kind: str, name: str) -> object:
        """The entry of `kind` called `name` (or one of its aliases)."""
        if not isinstance(name, str):
            raise SpecError(f"a {kind} name must be text, got {name!r}")
        key = self.index[kind].get(normalize(name))
        if key is None:
            close = self.close_matches(kind, name)
            lead = f"did you mean {', '.join(close)}? " if close else ""
            raise SpecError(f"unknown {kind} {name!r}",
                            hint=f"{lead}known {kind}s: {', '.join(sorted(self.entries[kind]))}")
        return self.entries[kind][key]

    def close_matches(self, kind: str, name: str) -> list[str]:
        """Entry names of `kind` whose name or alias is close to `name` (difflib)."""
        close = difflib.get_close_matches(normalize(name), list(self.index[kind]), n=4, cutoff=0.6)
        return list(dict.fromkeys(self.index[kind][c] for c in close))

    def find(self, name: str) -> list[object]:
        """Every instance, chip, core and cost table `name` names ("trn2" is a chip and a core)."""
        kinds = ("instance", "chip", "core", "cost_table")
        if not isinstance(name, str):
            raise SpecError(f"a hardware name must be text, got {name!r}")
        found = [self.get(kind, name) for kind in kinds if normalize(name) in self.index[kind]]
        if not found:
            close = list(dict.fromkeys(c for kind in kinds for c in self.close_matches(kind, name)))[:5]
            hint = f"did you mean {', '.join(close)}?" if close else "run `trnsim specs` for the list"
            raise SpecError(f"unknown hardware name {name!r}", hint=hint)
        return found

    def documents_of(self, sourced: Sourced) -> tuple[Document, ...]:
        """The public documents a fact cites, its alternatives' included, in order."""
        texts = [sourced.source, *(alt.source for alt in sourced.alternatives)]
        keys = dict.fromkeys(key for text in texts for key in citations(text))
        return tuple(self.documents[key] for key in keys)

    def core(self, name: str) -> CoreSpec:
        return self.get("core", name)

    def chip(self, name: str) -> ChipSpec:
        return self.get("chip", name)

    def instance(self, name: str) -> InstanceSpec:
        return self.get("instance", name)

    def cost_table(self, name: str) -> CostSpec:
        return self.get("cost_table", name)

    def fabric(self, name: str) -> FabricSpec:
        return self.get("fabric", name)


def load_catalog(data_dir: str | Path | None = None) -> Catalog:
    """Read and check every data file under `data_dir` (default: the package's data)."""
    data_dir = Path(data_dir) if data_dir is not None else DATA_DIR
    entries: dict[str, dict[str, object]] = {}
    index: dict[str, dict[str, str]] = {}
    documents = load_documents(data_dir / DOCUMENTS_FILE)

    def resolve(kind: str, name: str, where: Where) -> object:
        if kind == "document":
            if name not in documents:
                raise where.fail(f"source cites [{name}], which {DOCUMENTS_FILE} does not list",
                                 hint=f"known keys: {', '.join(documents)}")
            return documents[name]
        key = index.get(kind, {}).get(normalize(name))
        if key is None or key not in entries[kind]:
            known = ", ".join(sorted(entries.get(kind, {})))
            raise where.fail(f"names unknown {kind} {name!r}", hint=f"known: {known}")
        return entries[kind][key]

    for kind, (file_name, cls_name) in KINDS.items():
        raw = read_toml(data_dir / file_name)
        entries[kind], index[kind] = {}, _index(kind, raw, file_name)
        # An entry may name another of its own kind (Trainium4 -> Trainium3): build those last.
        for name in sorted(raw, key=lambda n: isinstance(raw[n], dict) and "relative_to" in raw[n]):
            entries[kind][name] = build(cls_name, name, raw[name], Where(file_name, name), resolve)
    return Catalog(data_dir=data_dir,
                   entries=MappingProxyType({k: MappingProxyType(v) for k, v in entries.items()}),
                   index=MappingProxyType({k: MappingProxyType(v) for k, v in index.items()}),
                   documents=MappingProxyType(documents))


def _index(kind: str, raw: dict, file_name: str) -> dict[str, str]:
    """normalized name or alias -> entry name; two entries claiming one name is an error."""
    index: dict[str, str] = {}
    for name, table in raw.items():
        aliases = table.get("aliases", []) if isinstance(table, dict) else []
        for alias in [name, *(a for a in aliases if isinstance(a, str))]:
            other = index.setdefault(normalize(alias), name)
            if other != name:
                raise Where(file_name, name, "aliases").fail(
                    f"{alias!r} already names {kind} {other!r}")
    return index


@functools.cache
def default_catalog() -> Catalog:
    """The package's own catalog, loaded on first use and then shared (it is read-only); read
    from its snapshot when the data and code are unchanged (`snapshot`)."""
    return snapshot.cached(DATA_DIR, load_catalog)
