"""docs/algorithms.md is generated from the registries and must match them."""

from __future__ import annotations

from genalign.algorithms import docs


def test_every_option_documents_formula_source_and_summary():
    for registry in docs.SECTIONS:
        for name in registry.names():
            meta = registry.meta(name)
            for key in docs.REQUIRED_META:
                assert meta.get(key), f"{registry.kind} {name!r} lacks {key!r}"


def test_committed_docs_match_the_registries():
    committed = docs.DOC_PATH.read_text(encoding="utf-8") if docs.DOC_PATH.exists() else ""
    assert committed == docs.render(), "docs/algorithms.md is out of date; run: python -m genalign.algorithms.docs"


def test_every_option_appears_in_the_table():
    text = docs.render()
    for registry in docs.SECTIONS:
        for name in registry.names():
            assert f"| {registry.kind} | `{name}` |" in text
