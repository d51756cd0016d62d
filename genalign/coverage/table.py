"""Build and check the rows of docs/coverage.md: one per seed of docs/seeds.csv, with what implements it or why not.

What implements a seed (:class:`Implementation`):

* every registered option whose ``source`` cites ``[n]`` (the citation docs/algorithms.md shows; a docstring's other
  brackets are cross-references such as "the share of [200]" or ranges such as ``[0, 1]``, not claims);
* the features and recipes of :mod:`genalign.coverage.features`.

An implementation's *mechanism test* is the test file that names it most often (a registered option: its Python name
or its quoted option name; a feature: its test terms; a recipe: every option it combines) among the folders that
mirror the package (:data:`MECHANISM_TEST_FOLDERS`; config validation and integration runs do not count).

Status of a seed (:data:`STATUSES`): *works* (implemented, a mechanism test found, nothing listed as missing),
*works, rest declined* (implemented and tested; reasons.yaml ``rest_declined`` says which part of the paper genalign
does not build and why: a part outside a group-relative trainer, not a part left for later), *partial* (implemented;
reasons.yaml ``partial`` says what is missing), *untested* (implemented, no mechanism test
found), *not yet built* (nothing implements it; a group-relative trainer can express it: reasons.yaml
``not_yet_built`` says what is missing) or *out of scope* (nothing implements it; reasons.yaml ``out_of_scope`` says
why). :func:`build_rows` raises :class:`CoverageError` when a citation is not a seed, when a seed is both implemented
and declined, when a partial note names a seed nothing implements, or when a seed has neither.
"""

from __future__ import annotations

import ast
import csv
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from genalign.coverage.features import FEATURES, RECIPES, Feature, Recipe

ROOT = Path(__file__).resolve().parents[2]
SEEDS_CSV = ROOT / "docs" / "seeds.csv"
REASONS_PATH = Path(__file__).with_name("reasons.yaml")
TESTS_DIR = ROOT / "tests"
#: test folders that mirror the package; a mechanism test of an option or a feature lives in one of them
MECHANISM_TEST_FOLDERS = ("algorithms", "experimental", "sampling", "schedulers", "policies", "trainer", "pipelines",
                          "rewards", "environments", "teachers")  # fmt: skip
#: modules of those folders that validate configs (they name every option they refuse, so they never count)
CONFIG_VALIDATION_TESTS = frozenset({"tests/teachers/test_teacher_config.py"})
#: a citation in a registered option's ``source``
CITATION = re.compile(r"\[(\d+)\]")
IDENTIFIER = re.compile(r"\w+")
QUOTED_NAME = re.compile(r"[\"']([\w.-]+)[\"']")
RELEVANCES = ("core", "useful")
STATUSES = ("works", "works, rest declined", "partial", "untested", "not yet built", "out of scope")
#: reasons.yaml sections: the status each gives, and whether the seed must be implemented
REASON_SECTIONS = {"rest_declined": ("works, rest declined", True), "partial": ("partial", True),
                   "not_yet_built": ("not yet built", False), "out_of_scope": ("out of scope", False)}  # fmt: skip


class CoverageError(ValueError):
    """The coverage data contradict each other (the message names the seed, the file and the fix)."""


@dataclass(frozen=True)
class Seed:
    """One row of the seed methods index (docs/seeds.csv)."""

    number: int
    method: str
    relevance: str
    component: str


@dataclass(frozen=True)
class Implementation:
    """One thing that implements a seed: a registered option, a feature or a recipe.

    Args:
        label: what the table shows, e.g. ``"credit rule `tree_grpo`"``.
        tier: ``stable`` or ``experimental`` (where the code lives, as for docs/algorithms.md).
        tests: the mechanism test files (repository-relative); empty when none was found.
    """

    label: str
    tier: str
    tests: tuple[str, ...]


@dataclass(frozen=True)
class CoverageRow:
    """A seed, its implementations, its status (one of :data:`STATUSES`) and the note (what is missing, or why)."""

    seed: Seed
    implementations: tuple[Implementation, ...]
    status: str
    note: str


def load_seeds(path: Path = SEEDS_CSV) -> dict[int, Seed]:
    """The seeds of ``path`` (written by scripts/copy_seed_index.py) by number."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    seeds = {}
    for row in rows:
        seed = Seed(int(row["number"]), row["method"], row["relevance"], row["component"])
        if seed.relevance not in RELEVANCES:
            raise CoverageError(f"{path}: seed [{seed.number}] has relevance {seed.relevance!r}, not one of "
                                f"{RELEVANCES}; fix shared/methods.md and run scripts/copy_seed_index.py")  # fmt: skip
        seeds[seed.number] = seed
    return seeds


def load_reasons(path: Path = REASONS_PATH) -> dict[str, dict[int, str]]:
    """reasons.yaml as ``{section: {seed number: one-line note}}`` for every section of :data:`REASON_SECTIONS`."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or set(data) - set(REASON_SECTIONS):
        raise CoverageError(f"{path}: expected a mapping with the sections {sorted(REASON_SECTIONS)}, "
                            f"got {sorted(data) if isinstance(data, dict) else type(data).__name__}")  # fmt: skip
    reasons: dict[str, dict[int, str]] = {}
    for section in REASON_SECTIONS:
        entries = data.get(section) or {}
        for number, note in entries.items():
            if not isinstance(number, int) or not isinstance(note, str) or not note.strip() or "\n" in note.strip():
                raise CoverageError(f"{path}: {section}.{number}: expected `NUMBER: one-line note`, got {note!r}")
        reasons[section] = {number: note.strip() for number, note in entries.items()}
    return reasons


@dataclass(frozen=True)
class ModuleWords:
    """How often each identifier and each quoted name occurs in one test module."""

    identifiers: Counter[str]
    quoted: Counter[str]

    @classmethod
    def of(cls, text: str) -> ModuleWords:
        return cls(Counter(IDENTIFIER.findall(text)), Counter(QUOTED_NAME.findall(text)))


def read_test_modules(tests_dir: Path = TESTS_DIR) -> dict[str, ModuleWords]:
    """The words of every test module under :data:`MECHANISM_TEST_FOLDERS`, by repository-relative path."""
    words = {}
    for folder in MECHANISM_TEST_FOLDERS:
        for path in sorted((tests_dir / folder).rglob("*.py")):
            name = path.relative_to(tests_dir.parent).as_posix()
            if name not in CONFIG_VALIDATION_TESTS:
                words[name] = ModuleWords.of(path.read_text(encoding="utf-8"))
    return words


def mechanism_test(
    tests: Mapping[str, ModuleWords], identifiers: Iterable[str], quoted: Iterable[str] = ()
) -> str | None:
    """The test module naming ``identifiers`` (as whole words) and ``quoted`` (as quoted strings) most often; ties go
    to the first path in sorted order; None when no module names them."""
    identifiers, quoted = [w for w in identifiers if w], [w for w in quoted if w]
    counts = {
        path: sum(words.identifiers[w] for w in identifiers) + sum(words.quoted[w] for w in quoted)
        for path, words in sorted(tests.items())
    }
    best = max(counts, key=lambda path: counts[path], default=None)
    return best if best is not None and counts[best] > 0 else None


def _registry_tests(registry: Any, name: str, tests: Mapping[str, ModuleWords]) -> tuple[str, ...]:
    implementation = registry.get(name)
    found = mechanism_test(tests, [getattr(implementation, "__name__", "")], [name])
    return (found,) if found else ()


def option_implementations(
    sections: Sequence[Any], tests: Mapping[str, ModuleWords]
) -> dict[int, list[Implementation]]:
    """``{seed number: [Implementation]}`` from every registered option's ``source`` citations."""
    found: dict[int, list[Implementation]] = {}
    for registry in sections:
        for name in registry.names():
            numbers = dict.fromkeys(int(n) for n in CITATION.findall(registry.meta(name).get("source", "")))
            if not numbers:
                continue
            item = Implementation(
                f"{registry.kind} `{name}`", registry.tier(name), _registry_tests(registry, name, tests)
            )
            for number in numbers:
                found.setdefault(number, []).append(item)
    return found


def target_definition(target: str) -> Path:
    """The module file that defines ``"package.module:attribute"`` at its top level (a class, a function or an
    assignment), found by reading the source without importing it; raises :class:`CoverageError` naming the target."""
    module_name, _, attribute = target.partition(":")
    base = ROOT.joinpath(*module_name.split("."))
    path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    if path is None:
        raise CoverageError(f"feature target {target!r}: no module {module_name}; fix genalign/coverage/features.py")
    defined = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
    if attribute not in defined:
        raise CoverageError(f"feature target {target!r}: {path.name} defines no {attribute!r}; fix "
                            "genalign/coverage/features.py")  # fmt: skip
    return path


def feature_implementations(
    features: Sequence[Feature], tests: Mapping[str, ModuleWords]
) -> dict[int, list[Implementation]]:
    found: dict[int, list[Implementation]] = {}
    for feature in features:
        target_definition(feature.target)
        tier = "experimental" if feature.target.startswith("genalign.experimental.") else "stable"
        test = mechanism_test(tests, feature.terms)
        item = Implementation(f"feature {feature.name} (`{feature.switch}`)", tier, (test,) if test else ())
        for number in feature.cites:
            found.setdefault(number, []).append(item)
    return found


def recipe_implementations(
    recipes: Sequence[Recipe], sections: Sequence[Any], tests: Mapping[str, ModuleWords]
) -> dict[int, list[Implementation]]:
    by_kind = {registry.kind: registry for registry in sections}
    found: dict[int, list[Implementation]] = {}
    for recipe in recipes:
        tiers, option_tests = [], []
        for kind, name in recipe.options:
            if kind not in by_kind or name not in by_kind[kind]:
                raise CoverageError(f"recipe for [{recipe.cites}] names {kind} {name!r}, which is not registered; "
                                    "fix genalign/coverage/features.py")  # fmt: skip
            tiers.append(by_kind[kind].tier(name))
            option_tests.append(_registry_tests(by_kind[kind], name, tests))
        options = " + ".join(f"{kind} `{name}`" for kind, name in recipe.options)
        label = f"recipe: {options}" + (f" (`{recipe.settings}`)" if recipe.settings else "")
        tier = "experimental" if "experimental" in tiers else "stable"
        found_tests = tuple(dict.fromkeys(path for paths in option_tests for path in paths))
        item = Implementation(label, tier, found_tests if all(option_tests) else ())
        found.setdefault(recipe.cites, []).append(item)
    return found


def _merge(*parts: dict[int, list[Implementation]]) -> dict[int, list[Implementation]]:
    merged: dict[int, list[Implementation]] = {}
    for part in parts:
        for number, items in part.items():
            merged.setdefault(number, []).extend(items)
    return merged


def _check(seeds: Mapping[int, Seed], implemented: Mapping[int, list[Implementation]],
           reasons: Mapping[str, Mapping[int, str]]) -> None:  # fmt: skip
    """Raise :class:`CoverageError` listing every contradiction between the citations, the reasons and the seeds."""
    problems = []
    for number, items in sorted(implemented.items()):
        if number not in seeds:
            names = ", ".join(item.label for item in items)
            problems.append(f"[{number}] is cited by {names} but is not a seed of docs/seeds.csv (fix the citation)")
    sections_of: dict[int, list[str]] = {}
    for section, entries in reasons.items():
        for number in entries:
            sections_of.setdefault(number, []).append(section)
            if number not in seeds:
                problems.append(f"reasons.yaml {section}: [{number}] is not a seed of docs/seeds.csv")
    for number, seed in sorted(seeds.items()):
        sections = sections_of.get(number, [])
        if len(sections) > 1:
            problems.append(f"[{number}] {seed.method}: in several reasons.yaml sections {sections}; keep one")
        for section in sections:
            must_be_implemented = REASON_SECTIONS[section][1]
            if must_be_implemented and number not in implemented:
                problems.append(f"[{number}] {seed.method}: reasons.yaml `{section}` but nothing implements it; move "
                                "it to `not_yet_built` or `out_of_scope`")  # fmt: skip
            if not must_be_implemented and number in implemented:
                names = ", ".join(item.label for item in implemented[number])
                problems.append(f"[{number}] {seed.method}: implemented by {names} and also declined in reasons.yaml "
                                f"`{section}`; remove the reason or move it to `partial`")  # fmt: skip
        if number not in implemented and not sections:
            problems.append(f"[{number}] {seed.method}: nothing implements it and reasons.yaml gives no reason; add "
                            "a one-line reason under `not_yet_built` or `out_of_scope`")  # fmt: skip
    if problems:
        raise CoverageError("coverage table inconsistent:\n" + "\n".join(problems))


def build_rows(
    sections: Sequence[Any],
    *,
    seeds: Mapping[int, Seed] | None = None,
    reasons: Mapping[str, Mapping[int, str]] | None = None,
    features: Sequence[Feature] = FEATURES,
    recipes: Sequence[Recipe] = RECIPES,
    tests: Mapping[str, ModuleWords] | None = None,
) -> list[CoverageRow]:
    """One :class:`CoverageRow` per seed, in number order.

    Args:
        sections: the registries whose options count (``genalign.docs.SECTIONS``).
        seeds, reasons, features, recipes, tests: the committed data by default (docs/seeds.csv,
            genalign/coverage/reasons.yaml, :mod:`genalign.coverage.features`, the test modules).
    """
    seeds = load_seeds() if seeds is None else seeds
    reasons = load_reasons() if reasons is None else reasons
    tests = read_test_modules() if tests is None else tests
    implemented = _merge(option_implementations(sections, tests), feature_implementations(features, tests),
                         recipe_implementations(recipes, sections, tests))  # fmt: skip
    _check(seeds, implemented, reasons)
    rows = []
    for number, seed in sorted(seeds.items()):
        items = tuple(implemented.get(number, ()))
        section, note = next(((s, entries[number]) for s, entries in reasons.items() if number in entries), ("", ""))
        tested = any(item.tests for item in items)
        if section and (section != "rest_declined" or tested):
            status = REASON_SECTIONS[section][0]
        else:  # the declined rest says nothing about the built part: it needs its mechanism test like any other
            status = "works" if tested else "untested"
        rows.append(CoverageRow(seed, items, status, note))
    return rows
