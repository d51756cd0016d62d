"""docs/coverage.md (every seed method mapped to the options implementing it, or to a reason) is generated and checked:
stale docs, a citation that is not a seed, a seed both implemented and declined, a seed with neither, or a feature
pointing at code that does not exist fail here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from genalign import docs
from genalign.coverage import markdown, table
from genalign.coverage.features import FEATURES, RECIPES, Feature, Recipe
from genalign.coverage.table import CoverageError, ModuleWords, Seed, build_rows, mechanism_test
from genalign.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
SHARED_METHODS = ROOT.parent / "shared" / "methods.md"
sys.path.insert(0, str(ROOT / "scripts"))
from copy_seed_index import SEEDS_CSV, csv_text, seed_rows  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list[table.CoverageRow]:
    return build_rows(docs.SECTIONS)


def test_committed_coverage_matches_the_registries(rows):
    committed = docs.COVERAGE_PATH.read_text(encoding="utf-8") if docs.COVERAGE_PATH.exists() else ""
    expected = markdown.render(rows, table.MECHANISM_TEST_FOLDERS)
    assert committed == expected, "docs/coverage.md is out of date; run: python -m genalign.docs"


def test_every_seed_has_one_row_with_an_implementation_or_a_reason(rows):
    seeds = table.load_seeds()
    assert [row.seed.number for row in rows] == sorted(seeds)
    for row in rows:
        assert row.status in table.STATUSES
        assert bool(row.implementations) != (row.status in ("not yet built", "out of scope")), row.seed
        assert row.note or row.status in ("works", "untested"), row.seed


def test_every_citation_of_a_registered_option_is_a_seed():
    seeds = table.load_seeds()
    cited = table.option_implementations(docs.SECTIONS, {})
    strangers = {number: [item.label for item in items] for number, items in cited.items() if number not in seeds}
    assert not strangers, f"options cite abstract numbers that are not seeds of docs/seeds.csv: {strangers}"


def test_seeds_csv_matches_the_shared_index():
    if not SHARED_METHODS.is_file():
        pytest.skip(f"{SHARED_METHODS} is not beside this checkout")
    expected = csv_text(seed_rows(SHARED_METHODS.read_text(encoding="utf-8")))
    assert SEEDS_CSV.read_text(encoding="utf-8") == expected, (
        "docs/seeds.csv is out of date; run: python scripts/copy_seed_index.py, then python -m genalign.docs"
    )


def test_seed_rows_reads_the_six_columns_and_an_escaped_pipe():
    text = (
        "| N | method | modality | component | mechanism | relevance |\n|---|---|---|---|---|---|\n"
        "| 7 | Foo (F) | AR-LLM | credit | uses 1/\\|o\\| | core |\n"
    )
    assert seed_rows(text) == [{"number": "7", "method": "Foo (F)", "relevance": "core", "component": "credit"}]
    with pytest.raises(ValueError, match="line 1: expected 6 columns"):
        seed_rows("| 7 | Foo | core |")


def test_every_feature_target_exists_and_every_recipe_option_is_registered():
    for feature in FEATURES:
        assert table.target_definition(feature.target).is_file()
    by_kind = {registry.kind: registry for registry in docs.SECTIONS}
    for recipe in RECIPES:
        for kind, name in recipe.options:
            assert name in by_kind[kind], (recipe.cites, kind, name)
    with pytest.raises(CoverageError, match=r"features\.py defines no 'NoSuchThing'"):
        table.target_definition("genalign.coverage.features:NoSuchThing")
    with pytest.raises(CoverageError, match=r"no module genalign\.nowhere"):
        table.target_definition("genalign.nowhere:Thing")


def test_mechanism_test_is_the_module_naming_the_option_most_often():
    modules = {
        "tests/algorithms/test_a.py": ModuleWords.of('from x import tree_credit\nrun("tree")\n'),
        "tests/algorithms/test_b.py": ModuleWords.of('tree_credit(1)\ntree_credit(2)\nclip="tree"\n'),
        "tests/algorithms/test_c.py": ModuleWords.of("subtree_credit = 1  # tree_credits\n"),
    }
    assert mechanism_test(modules, ["tree_credit"], ["tree"]) == "tests/algorithms/test_b.py"  # 3 mentions over 2
    assert mechanism_test(modules, ["absent"], ["absent"]) is None


# ---------------------------------------------------------------------------------------- the checks, on toy data


def _rule(advantages, batch):
    return advantages


def _registry(sources: dict[str, str]) -> Registry:
    registry: Registry = Registry("credit rule")
    for name, source in sources.items():
        registry.register(name, formula="f", source=source, summary="s")(_rule)
    return registry


SEEDS = {n: Seed(n, f"method {n}", "core" if n < 4 else "useful", "credit") for n in range(1, 7)}
TESTS = {"tests/algorithms/test_rules.py": ModuleWords.of('apply("alpha")\napply("beta")\n')}
NO_REASONS = {"rest_declined": {}, "partial": {}, "not_yet_built": {}, "out_of_scope": {}}


def _build(sources, reasons=None, features=(), recipes=()):
    return build_rows(
        [_registry(sources)], seeds=SEEDS, reasons=reasons or NO_REASONS, features=features, recipes=recipes,
        tests=TESTS,
    )  # fmt: skip


def test_statuses_and_counts_on_a_toy_catalogue():
    sources = {"alpha": "[1] A", "beta": "[2] B; [3] B part", "gamma": "[4] G (untested)"}
    reasons = {"partial": {3: "the other part"}, "not_yet_built": {5: "needs X"}, "out_of_scope": {6: "robotics"}}
    rows = _build(sources, reasons)
    status = {row.seed.number: row.status for row in rows}
    assert status == {1: "works", 2: "works", 3: "partial", 4: "untested", 5: "not yet built", 6: "out of scope"}
    assert [item.tests for item in rows[0].implementations] == [("tests/algorithms/test_rules.py",)]
    assert rows[2].note == "the other part"
    text = markdown.render(rows, ("algorithms",))
    assert "| core | 3 | 2 | 0 | 1 | 0 | 0 | 0 |" in text  # seeds 1-3: two work, one partial
    assert "| useful | 3 | 0 | 0 | 0 | 1 | 1 | 1 |" in text  # seeds 4-6
    assert "| [5] | method 5 | credit | not yet built | — | needs X |" in text


def test_a_declined_rest_keeps_a_tested_seed_working_and_needs_an_implementation():
    sources = {"alpha": "[1] A", "gamma": "[4] G (untested)"}
    reasons = {"rest_declined": {1: "the online part is inference-time", 4: "the rest is robotics"},
               "out_of_scope": {2: "x", 3: "x", 5: "x", 6: "x"}}  # fmt: skip
    status = {row.seed.number: (row.status, row.note) for row in _build(sources, reasons)}
    assert status[1] == ("works, rest declined", "the online part is inference-time")
    assert status[4][0] == "untested"  # declining the rest does not excuse the built part from its test
    with pytest.raises(CoverageError, match=r"\[2\] method 2: reasons.yaml `rest_declined` but nothing implements"):
        _build(sources, {"rest_declined": {2: "x"}, "out_of_scope": {3: "x", 5: "x", 6: "x"}})


def test_a_citation_that_is_not_a_seed_fails():
    with pytest.raises(CoverageError, match=r"\[99\] is cited by credit rule `alpha` but is not a seed"):
        _build({"alpha": "[99] A"}, {"out_of_scope": dict.fromkeys(range(1, 7), "x")})


def test_a_seed_both_implemented_and_declined_fails():
    reasons = {"partial": {}, "not_yet_built": {1: "needs X"}, "out_of_scope": dict.fromkeys(range(2, 7), "x")}
    with pytest.raises(CoverageError, match=r"\[1\] method 1: implemented by credit rule `alpha` and also declined"):
        _build({"alpha": "[1] A"}, reasons)


def test_a_seed_with_neither_an_implementation_nor_a_reason_fails():
    with pytest.raises(CoverageError, match=r"\[6\] method 6: nothing implements it and reasons.yaml gives no reason"):
        _build({"alpha": "[1] A"}, {"out_of_scope": dict.fromkeys(range(2, 6), "x")})


def test_a_partial_note_for_a_seed_nothing_implements_fails():
    reasons = {"partial": {2: "half"}, "out_of_scope": dict.fromkeys(range(3, 7), "x")}
    with pytest.raises(CoverageError, match=r"\[2\] method 2: reasons.yaml `partial` but nothing implements it"):
        _build({"alpha": "[1] A"}, reasons)


def test_features_and_recipes_cover_seeds_like_options():
    feature = Feature("toy feature", (5,), "genalign.coverage.table:build_rows", "policy.toy", ("build_rows",))
    recipe = Recipe(6, (("credit rule", "alpha"), ("credit rule", "beta")), "algorithm.group_size: 2")
    tests = {**TESTS, "tests/trainer/test_toy.py": ModuleWords.of("build_rows()")}
    rows = build_rows([_registry({"alpha": "[1] A", "beta": "[2] B"})], seeds=SEEDS, tests=tests,
                      reasons={"out_of_scope": {3: "x", 4: "x"}}, features=[feature], recipes=[recipe])  # fmt: skip
    by_number = {row.seed.number: row for row in rows}
    assert by_number[5].status == "works"
    assert by_number[5].implementations[0].tests == ("tests/trainer/test_toy.py",)
    assert by_number[6].status == "works"
    assert by_number[6].implementations[0].label.startswith("recipe: credit rule `alpha` + credit rule `beta`")
    with pytest.raises(CoverageError, match="names credit rule 'delta', which is not registered"):
        _build({"alpha": "[1] A"}, recipes=[Recipe(2, (("credit rule", "delta"),))])


def test_the_docs_command_reports_a_stale_coverage_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "coverage.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(docs, "GENERATED", {stale: lambda: "new\n"})
    assert docs.main(["--check"]) == 1
    assert f"{stale} is out of date; run: python -m genalign.docs" in capsys.readouterr().err
    assert docs.main([]) == 0 and stale.read_text(encoding="utf-8") == "new\n"


def test_the_docs_command_names_what_to_fix_when_the_coverage_data_disagree(tmp_path, monkeypatch, capsys):
    def inconsistent() -> str:
        raise CoverageError("coverage table inconsistent:\n[1] method 1: implemented by X and also declined")

    monkeypatch.setattr(docs, "GENERATED", {tmp_path / "coverage.md": inconsistent})
    assert docs.main([]) == 1
    assert "cannot be generated: coverage table inconsistent:\n[1] method 1" in capsys.readouterr().err
