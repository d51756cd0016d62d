"""Token judges: callables that mark character spans of a completion with a value (an error, its severity, a
credited step), the fine-grained counterpart of a reward.

A judge is ``judge(completions, rows) -> list[list[Span]]``: ``completions`` ``[N]`` strings, ``rows`` ``[N]`` the
dataset rows (the columns a judge reads: a reference, a language, a rubric, facts), and for each completion the spans
``(start, end, value)`` it judged (character offsets into that completion, ``end`` exclusive; a negative value is an
error, its magnitude the severity). Unjudged text is worth 0.

The registry :data:`TOKEN_JUDGES` holds *factories* (``TOKEN_JUDGES.get(name)(**args)`` returns the judge), like
:data:`~genalign.rewards.base.REWARDS`, so a config chooses and parametrises one (``policy.probes.token_judge``) and
a learned process reward model (a claim checker, a generative step critic, a quality estimator) plugs in by
registering a factory. The built-in judges are rule-based and need no download:

* ``arithmetic_claims``: every claim ``a op b = c`` whose arithmetic is wrong (the claim, or its whole line with
  ``scope: step``); a step critic for [169] and [205], a claim checker for [155].
* ``counted_claims``: every ``<number> <noun>`` claim that contradicts the row's annotated counts (``facts``), the
  procedural stand-in of a perception claim checker ([155]).
* ``reference_diff``: every completion word not aligned to the row's reference (a replaced or inserted word is a
  *major* error, a word differing only in case or punctuation a *minor* one; MQM weights 5 and 1), an error-span
  quality estimator for translation ([224]).
* ``script_mismatch``: every word written in a script other than the row's target language's ([105]).
* ``keyword_spans``: every match of a pattern or of the row's keyword, the tokens relevant to a rubric constraint
  (a relevance judge of ``policy.probes.relevance_judges``, [274]).
* ``prefix_reward_gains`` (:mod:`genalign.rewards.prefix_gains`): any configured sequence reward scored on every word
  prefix, each word valued by its reward gain ([247]).

The four error judges cannot be earned by text that imitates a verdict: they read the completion's checkable content (its
arithmetic, its counts, its words against the reference, its script) and the row, never a self-assessment, and they
only mark errors (no positive value). ``prefix_reward_gains`` is as forgeable as the reward it reads.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from genalign.registry import Registry

#: one judged span of a completion: (first character, end character (exclusive), value)
Span = tuple[int, int, float]
TokenJudge = Callable[[Sequence[str], Sequence[Mapping[str, Any]]], list[list[Span]]]

#: name -> factory ``(**args) -> TokenJudge``
TOKEN_JUDGES: Registry[Callable[..., TokenJudge]] = Registry("token judge")

#: ``a op b = c`` with integers or decimals; ``×`` / ``x`` / ``*`` multiply, ``÷`` / ``/`` divide
CLAIM = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*([-+*/×x÷])\s*(-?\d+(?:\.\d+)?)\s*=\s*(-?\d+(?:\.\d+)?)(?![\d.]*\d)")
#: ``<number> <word>`` (a count claim)
COUNT = re.compile(r"(?<![\w.])(\d+)\s+([A-Za-z]+)")
WORD = re.compile(r"\S+")
#: MQM severity weights of ``reference_diff`` (minor, major)
MINOR, MAJOR = 1.0, 5.0
#: the Unicode scripts a language is written in (the first word of a character's Unicode name)
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    "en": ("LATIN",), "fr": ("LATIN",), "de": ("LATIN",), "es": ("LATIN",), "it": ("LATIN",), "pt": ("LATIN",),
    "ru": ("CYRILLIC",), "uk": ("CYRILLIC",), "zh": ("CJK",), "ja": ("CJK", "HIRAGANA", "KATAKANA"),
    "ko": ("HANGUL", "CJK"), "ar": ("ARABIC",), "hi": ("DEVANAGARI",), "el": ("GREEK",), "he": ("HEBREW",),
}  # fmt: skip


def register_token_judge(name: str, **meta: Any) -> Callable:
    """Register a judge factory ``(**args) -> judge`` under ``name``."""
    return TOKEN_JUDGES.register(name, **meta)


def _column(row: Mapping[str, Any], column: str, judge: str) -> Any:
    if column not in row:
        raise ValueError(f"token judge {judge!r} reads row column {column!r}, which a row lacks (columns: "
                         f"{sorted(row)}); add it to the data or set the judge's column argument")  # fmt: skip
    return row[column]


def _arithmetic_is_right(a: str, op: str, b: str, c: str) -> bool:
    x, y, z = Fraction(a), Fraction(b), Fraction(c)
    if op in "/÷":
        return y != 0 and x / y == z
    value = {"+": x + y, "-": x - y}.get(op, x * y)
    return value == z


def _line_of(text: str, start: int, end: int) -> tuple[int, int]:
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return first, len(text) if last < 0 else last


@register_token_judge("arithmetic_claims", source="[155] [169] [205]")
def arithmetic_claims(*, scope: str = "claim", penalty: float = 1.0) -> TokenJudge:
    """Marks every wrong arithmetic claim ``a op b = c`` with ``−penalty``: the claim itself (``scope: claim``) or
    the whole reasoning step (its line, ``scope: step``)."""
    if scope not in ("claim", "step"):
        raise ValueError(f"arithmetic_claims: scope={scope!r} must be 'claim' or 'step'")
    if not penalty > 0:
        raise ValueError(f"arithmetic_claims: penalty={penalty!r} must be > 0 (the value of a wrong claim is −penalty)")

    def judge(completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[list[Span]]:
        result = []
        for text in completions:
            spans: dict[tuple[int, int], float] = {}
            for match in CLAIM.finditer(text):
                if not _arithmetic_is_right(*match.groups()):
                    where = match.span() if scope == "claim" else _line_of(text, *match.span())
                    spans[where] = -penalty
            result.append([(start, end, value) for (start, end), value in spans.items()])
        return result

    return judge


@register_token_judge("counted_claims", source="[155]")
def counted_claims(*, facts_column: str = "facts", penalty: float = 1.0) -> TokenJudge:
    """Marks every ``<number> <noun>`` claim whose noun the row's annotation counts (``facts``: ``{noun: count}``,
    singular or plural written as in the annotation or with a trailing ``s``) with ``−penalty`` when the number is
    wrong; nouns the annotation does not count are not judged."""
    if not penalty > 0:
        raise ValueError(f"counted_claims: penalty={penalty!r} must be > 0")

    def judge(completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[list[Span]]:
        result = []
        for text, row in zip(completions, rows, strict=True):
            facts = {str(k).lower(): int(v) for k, v in dict(_column(row, facts_column, "counted_claims")).items()}
            spans = []
            for match in COUNT.finditer(text):
                noun = match.group(2).lower()
                count = facts.get(noun, facts.get(noun[:-1]) if noun.endswith("s") else None)
                if count is not None and int(match.group(1)) != count:
                    spans.append((match.start(), match.end(), -penalty))
            result.append(spans)
        return result

    return judge


def _plain(word: str) -> str:
    return re.sub(r"[^\w]", "", word).lower()


@register_token_judge("reference_diff", source="[224]")
def reference_diff(*, reference_column: str = "answer", minor: float = MINOR, major: float = MAJOR) -> TokenJudge:
    """Marks the completion's words against the row's reference translation (word alignment of
    :class:`difflib.SequenceMatcher` on case- and punctuation-free words): a word replaced or inserted is a major
    error (``−major``), an aligned word whose spelling differs in case or punctuation a minor one (``−minor``).
    Omitted reference words have no completion span to mark (the sequence reward sees them)."""
    if not 0 < minor <= major:
        raise ValueError(f"reference_diff: need 0 < minor <= major, got minor={minor!r}, major={major!r}")

    def judge(completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[list[Span]]:
        result = []
        for text, row in zip(completions, rows, strict=True):
            reference = str(_column(row, reference_column, "reference_diff")).split()
            words = list(WORD.finditer(text))
            matcher = difflib.SequenceMatcher(a=[_plain(w.group()) for w in words], b=[_plain(w) for w in reference],
                                              autojunk=False)  # fmt: skip
            spans = []
            for tag, i1, i2, j1, _ in matcher.get_opcodes():
                for k in range(i1, i2):
                    word = words[k]
                    if tag != "equal":
                        spans.append((word.start(), word.end(), -major))
                    elif word.group() != reference[j1 + k - i1]:
                        spans.append((word.start(), word.end(), -minor))
            result.append(spans)
        return result

    return judge


@register_token_judge("keyword_spans", source="[274]")
def keyword_spans(*, pattern: str | None = None, column: str | None = None, value: float = 1.0) -> TokenJudge:
    """Marks every match of a regular expression with ``value``: the fixed ``pattern``, or the row's ``column`` taken
    as literal text (e.g. the keyword a rubric constraint asks for): the tokens relevant to that constraint. Exactly
    one of ``pattern`` and ``column``."""
    if (pattern is None) == (column is None):
        raise ValueError("keyword_spans: give exactly one of pattern (a regular expression) and column (a row column "
                         "holding the text to find)")  # fmt: skip
    fixed = re.compile(pattern) if pattern is not None else None

    def judge(completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[list[Span]]:
        result = []
        for text, row in zip(completions, rows, strict=True):
            regex = fixed or re.compile(re.escape(str(_column(row, column, "keyword_spans"))))
            result.append([(m.start(), m.end(), value) for m in regex.finditer(text) if m.end() > m.start()])
        return result

    return judge


def script_of(character: str) -> str | None:
    """The script of a letter (the first word of its Unicode name, e.g. ``LATIN``, ``CYRILLIC``, ``CJK``), None for
    anything else (digits, punctuation, spaces)."""
    if not character.isalpha():
        return None
    return unicodedata.name(character, "UNKNOWN").split()[0]


@register_token_judge("script_mismatch", source="[105]")
def script_mismatch(
    *, language_column: str = "language", scripts: Mapping[str, Sequence[str]] | None = None, penalty: float = 1.0
) -> TokenJudge:
    """Marks every word holding a letter of a script other than the row's language's (``language`` column, a code
    of :data:`LANGUAGE_SCRIPTS` or of ``scripts``) with ``−penalty``: the language-confusion errors of [105]."""
    table = {**LANGUAGE_SCRIPTS, **{k: tuple(v) for k, v in (scripts or {}).items()}}
    if not penalty > 0:
        raise ValueError(f"script_mismatch: penalty={penalty!r} must be > 0")

    def judge(completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[list[Span]]:
        result = []
        for text, row in zip(completions, rows, strict=True):
            language = str(_column(row, language_column, "script_mismatch"))
            if language not in table:
                raise ValueError(f"script_mismatch: language {language!r} has no scripts; known: {sorted(table)}; "
                                 "add it with the judge's scripts argument")  # fmt: skip
            allowed = set(table[language])
            spans = []
            for word in WORD.finditer(text):
                found = {script_of(c) for c in word.group()} - {None}
                if found - allowed:
                    spans.append((word.start(), word.end(), -penalty))
            result.append(spans)
        return result

    return judge


def token_values(spans: Sequence[Span], ends: Sequence[int]) -> list[float]:
    """The value of every token of a completion whose tokens end at characters ``ends`` (token ``t`` covers
    ``[ends[t − 1], ends[t])``): the value of largest magnitude among the spans it overlaps (a negative one on a tie),
    0 where none does (and for a token that decodes to nothing)."""
    values = []
    for t, end in enumerate(ends):
        start = ends[t - 1] if t else 0
        hits = [value for first, last, value in spans if first < end and last > start and end > start]
        values.append(min(hits, key=lambda v: (-abs(v), v)) if hits else 0.0)
    return values


#: how the values of several calls of a judge (its votes) are combined per token
VOTES = ("mean", "majority")


def combine_votes(votes: Sequence[Sequence[float]], rule: str) -> list[float]:
    """Per token: the ``mean`` of the votes' values, or (``majority``) the mean of the non-zero values where more
    than half the votes marked the token, else 0. ``votes`` ``[V][T]``."""
    if rule not in VOTES:
        raise ValueError(f"token judge votes are combined by one of {VOTES}, got {rule!r}")
    combined = []
    for column in zip(*votes, strict=True):
        marked = [v for v in column if v != 0]
        if rule == "mean":
            combined.append(sum(column) / len(column))
        else:
            combined.append(sum(marked) / len(marked) if 2 * len(marked) > len(column) else 0.0)
    return combined


def token_judge(name: str, args: Mapping[str, Any] | None = None) -> TokenJudge:
    """The judge ``name`` built with ``args`` (a registered name; an unknown one raises with the known names)."""
    return TOKEN_JUDGES.get(name)(**dict(args or {}))


__all__ = [
    "LANGUAGE_SCRIPTS",
    "TOKEN_JUDGES",
    "VOTES",
    "Span",
    "TokenJudge",
    "arithmetic_claims",
    "combine_votes",
    "counted_claims",
    "keyword_spans",
    "reference_diff",
    "register_token_judge",
    "script_mismatch",
    "script_of",
    "token_judge",
    "token_values",
]
