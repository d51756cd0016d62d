"""docs/algorithms.md is generated from the registries and must match them."""

from __future__ import annotations

import inspect
import re

from genalign import docs


def test_every_option_documents_formula_source_and_summary():
    for registry in docs.SECTIONS:
        for name in registry.names():
            meta = registry.meta(name)
            for key in docs.REQUIRED_META:
                assert meta.get(key), f"{registry.kind} {name!r} lacks {key!r}"


def test_committed_docs_match_the_registries():
    committed = docs.DOC_PATH.read_text(encoding="utf-8") if docs.DOC_PATH.exists() else ""
    assert committed == docs.render(), "docs/algorithms.md is out of date; run: python -m genalign.docs"


def test_every_option_appears_in_the_table():
    text = docs.render()
    for registry in docs.SECTIONS:
        for name in registry.names():
            assert f"| {registry.kind} | `{name}` |" in text


#: abstract numbers of the methods asked for by issue 8 (method catalogue I)
ISSUE_8_SOURCES = (
    65, 80, 207, 216, 297, 213, 228, 211, 267, 99, 111,  # advantages and baselines
    191, 61, 238,  # several rewards
    15, 21, 55, 271, 236, 212, 59,  # importance ratios
    263, 149, 189, 204, 223, 181, 73, 318, 60, 323,  # trust regions and clipping
    75, 206, 301, 197, 201, 287,  # regularisers
)  # fmt: skip


def test_every_catalogue_method_is_documented_with_its_source():
    text = docs.render()
    missing = [n for n in ISSUE_8_SOURCES if f"[{n}]" not in text]
    assert not missing, f"no option cites {missing}"


READING_CHOSEN = re.compile(r"reading chosen|form inferred|genalign's form", re.IGNORECASE)


def test_experimental_tier_is_exactly_the_options_whose_form_genalign_chose():
    """Both directions: an option whose docstring says genalign chose its form from an abstract lives under
    genalign/experimental (and is shown experimental in docs/algorithms.md), and every option that lives there says
    so; every other option is shown stable."""
    text = docs.render()
    for registry in docs.SECTIONS:
        for name in registry.names():
            option = registry.get(name)
            chosen = bool(
                READING_CHOSEN.search(inspect.getdoc(option) or "")
                or READING_CHOSEN.search(registry.meta(name).get("source", ""))
            )
            module = getattr(option, "__module__", None) or type(option).__module__
            lives_there = module.startswith("genalign.experimental.")
            assert lives_there == chosen, f"{registry.kind} {name!r} ({module}): location and docstring disagree"
            tier = "experimental" if lives_there else "stable"
            assert registry.tier(name) == tier
            assert f"| {registry.kind} | `{name}` | {tier} |" in text


def test_every_experimental_module_registers_only_experimental_options():
    """Nothing but experimental options is defined under genalign/experimental (no stable option hides there)."""
    import genalign.experimental

    genalign.experimental.load_all()
    for registry in docs.SECTIONS:
        for name in registry.names():
            option = registry.get(name)
            module = getattr(option, "__module__", None) or type(option).__module__
            assert module.startswith("genalign.experimental.") == (registry.tier(name) == "experimental")
