"""Every catalog figure cites public documents a reader can open (sources.toml: title and URL)."""

from pathlib import Path

import pytest
from catalog_copies import corrupt, load_error

from trnsim import hardware
from trnsim.hardware.catalog import default_catalog
from trnsim.hardware.describe import rows
from trnsim.hardware.specs import citations

SPECS = [*hardware.cores(), *hardware.chips(), *hardware.instances(), hardware.core("trn2").costs,
         *(spec for kind in ("fabric", "collective_model")
           for spec in default_catalog().entries[kind].values())]
SOURCED = [(spec.name, row.path, row.sourced) for spec in SPECS for row in rows(spec) if row.sourced]


def every_source_text():
    for name, path, sourced in SOURCED:
        yield name, path, sourced.source
        for alternative in sourced.alternatives:
            yield name, f"{path} (alternative)", alternative.source


def test_every_source_resolves_to_documents_with_urls():
    documents = default_catalog().documents
    texts = list(every_source_text())
    assert len(texts) > 500
    for name, path, source in texts:
        keys = citations(source)
        assert keys and source.startswith("["), (name, path, source)
        for key in keys:
            assert documents[key].urls, (name, path, key)
            assert all(url.startswith(("https://", "http://")) for url in documents[key].urls)


NOTES_OUTSIDE_THE_REPOSITORY = ("§", "hardware-and-performance.md", "nki.md", "numerics.md")


def test_no_source_points_at_a_note_outside_the_repository():
    for name, path, source in every_source_text():
        assert not any(note in source for note in NOTES_OUTSIDE_THE_REPOSITORY), (name, path, source)


def test_every_listed_document_is_cited():
    cited = {key for _, _, source in every_source_text() for key in citations(source)}
    assert cited == set(default_catalog().documents)


def test_where_sources_disagree_the_note_says_which_is_used():
    for name, path, sourced in SOURCED:
        if sourced.alternatives:
            assert "chosen" in sourced.note, (name, path)


def test_documents_of_a_fact_include_its_alternatives():
    catalog = default_catalog()
    keys = [doc.key for doc in catalog.documents_of(hardware.chip("trn2").source_of("hbm_bytes_per_s"))]
    assert keys == ["S4", "S10", "T4"]
    assert catalog.documents["S4"].urls[0].endswith("about-neuron/arch/neuron-hardware/trainium2.html")


def edited_load_error(data: Path, file: str, old: str, new: str) -> str:
    corrupt(data, file, old, new)
    return load_error(data)


def test_a_source_citing_an_unknown_document_is_refused(data):
    message = edited_load_error(data, "cores.toml", 'psum_banks = { value = 8, source = "[S10]" }',
                         'psum_banks = { value = 8, source = "[S99]" }')
    assert message.startswith("cores.toml: [NeuronCore-v3] psum_banks: source cites [S99], which "
                              "sources.toml does not list")


def test_a_source_citing_no_document_is_refused(data):
    message = edited_load_error(data, "cores.toml", 'psum_banks = { value = 8, source = "[S10]" }',
                         'psum_banks = { value = 8, source = "notes §3" }')
    assert message.startswith("cores.toml: [NeuronCore-v3] psum_banks: source 'notes §3' cites no document")


def test_an_alternative_citing_an_unknown_document_is_refused(data):
    message = edited_load_error(data, "chips.toml", '{ value = 2.4, unit = "TB/s", source = "[T4]"',
                         '{ value = 2.4, unit = "TB/s", source = "[T5]"')
    assert message.startswith("chips.toml: [Trainium2] hbm_bytes_per_s.alternatives[1]: source cites [T5]")


@pytest.mark.parametrize(("old", "new", "problem"), [
    ('urls = ["https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/trainium2.html"]',
     "urls = []", "[S4] urls: expected a list of http(s) URLs"),
    ('urls = ["https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/trainium2.html"]',
     'urls = ["trainium2.rst"]', "[S4] urls: expected a list of http(s) URLs"),
    ('title = "Trainium2 Architecture (Neuron docs)"', 'title = ""', "[S4] title: missing title"),
])
def test_a_document_without_a_url_or_title_is_refused(data, old, new, problem):
    assert edited_load_error(data, "sources.toml", old, new).startswith(f"sources.toml: {problem}")
