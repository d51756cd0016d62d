"""``math_equivalence``: a completion's final answer against the ``answer`` column, compared as a string, as an exact
rational number, then symbolically with sympy (in a worker process with a timeout:
:mod:`genalign.rewards.math_answers.sympy_worker`). The answer text is never evaluated: :mod:`genalign.rewards.math_answers` parses it
with a restricted grammar and builds the sympy objects itself; an answer outside the grammar scores 0.0 and is counted
(``pop_metrics()``).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from genalign.rewards.answers import NUMBER, AnswerFormat, extract_answer
from genalign.rewards.base import register_reward
from genalign.rewards.inputs import AnswerColumn, answer_text, check_column, completion_text
from genalign.rewards.math_answers.sympy_worker import MathOutcome, symbolic_outcome

# what the exact-rational fast path hands to Fraction: plain numbers only (Fraction("1e999999999") alone takes minutes)
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,3})?(?:/\d+)?", re.ASCII)
#: a number written with a decimal point or an exponent: the only kind compared with the tolerance
_APPROXIMATE = re.compile(r"[.eE]")
#: ``x = <answer>``: a final answer stated as the value of a single-letter variable
_ASSIGNMENT = re.compile(r"\s*[A-Za-z]\s*=\s*(?P<value>[^=]+)")


def _clean_math(text: str) -> str:
    """Drop LaTeX decoration that does not change a value: ``$``, ``\\left``, ``\\text{}``, spaces, a final period."""
    text = text.strip().strip("$").strip()
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text)
    text = re.sub(r"\\(left|right|displaystyle|!|,|;)", "", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = re.sub(r"\^\{?\\circ\}?", "", text).replace("\\%", "").replace("%", "")
    text = re.sub(r"\s+", "", text)
    return text.rstrip(".")


def _as_fraction(text: str) -> Fraction | None:
    """``text`` as an exact rational (``"1,234"``, ``"-0.5"``, ``"3/4"``, ``"\\frac{3}{4}"``), or None."""
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", text)
    if frac:
        text = f"{frac.group(1)}{frac.group(2)}/{frac.group(3)}"
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    if not _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _drop_assignment(text: str, other: str) -> str:
    """``x = 5`` -> ``5`` when the other answer is not an equation (``\\boxed{x = 5}`` answers "x is what?")."""
    match = _ASSIGNMENT.fullmatch(text)
    return match.group("value") if match and "=" not in other else text


def compare_math_answers(
    predicted: str, reference: str, *, tolerance: float = 1e-6, timeout_s: float = 5.0
) -> MathOutcome:
    """Compare two final answers: as cleaned strings, as rational numbers, then symbolically
    (:func:`symbolic_outcome`); ``"no_answer"`` when the prediction is empty after cleaning.

    Two numbers are compared exactly unless one is written with a decimal point or an exponent; then they are equal
    within the relative ``tolerance`` (``|a - b| <= tolerance * max(|a|, |b|)``). An answer ``x = <value>`` (one
    letter) is compared as ``<value>`` when the other answer is not an equation.
    """
    predicted, reference = _drop_assignment(predicted, reference), _drop_assignment(reference, predicted)
    cleaned, cleaned_reference = _clean_math(predicted), _clean_math(reference)
    if not cleaned:
        return "no_answer"
    if not cleaned_reference:
        return "reference_parse_failure"
    if cleaned == cleaned_reference:
        return "equal"
    a, b = _as_fraction(cleaned), _as_fraction(cleaned_reference)
    if a is not None and b is not None:
        if not (_APPROXIMATE.search(cleaned) or _APPROXIMATE.search(cleaned_reference)):
            return "equal" if a == b else "not_equal"  # integers and fractions are exact: 1234567 is not 1234568
        return "equal" if abs(a - b) <= tolerance * max(abs(a), abs(b)) else "not_equal"
    if (a is not None or b is not None) and NUMBER.fullmatch(cleaned) and NUMBER.fullmatch(cleaned_reference):
        return "not_equal"
    return symbolic_outcome(predicted, reference, timeout_s=timeout_s)


def math_answers_equal(predicted: str, reference: str, *, tolerance: float = 1e-6, timeout_s: float = 5.0) -> bool:
    """Whether two final answers are equal (:func:`compare_math_answers` is ``"equal"``)."""
    return compare_math_answers(predicted, reference, tolerance=tolerance, timeout_s=timeout_s) == "equal"


#: outcome -> the ``pop_metrics`` counter it increments
_OUTCOME_COUNTERS = {
    "no_answer": "no_answer",
    "parse_failure": "parse_failures",
    "reference_parse_failure": "reference_parse_failures",
    "timeout": "timeouts",
    "symbolic_error": "symbolic_errors",
}


@register_reward("math_equivalence", source="rule")
class MathEquivalence:
    """1.0 where the completion's final answer equals ``answer`` mathematically, else 0.0 (also with no answer).

    The reference is used as is unless it contains a ``\\boxed{}`` or GSM8K ``####`` marker, in which case that part
    is extracted. ``None`` where the reference is null or not an answer (a list, a dict, true/false), counted as
    ``bad_answer`` and named once (:class:`genalign.rewards.inputs.AnswerColumn`). Comparison:
    :func:`compare_math_answers`; the answer text is never evaluated (:mod:`genalign.rewards.math_answers`). An
    answer outside the parser's grammar gets 0.0 and is counted; :meth:`pop_metrics` reports the counts since the
    previous call.

    Args:
        answer_format: where the final answer is in a completion (:func:`extract_answer`).
        tolerance: relative tolerance of the exact-rational comparison.
        timeout_s: time limit of one symbolic comparison, in seconds (then 0.0 and a counted timeout).
    """

    def __init__(self, *, answer_format: AnswerFormat = "auto", tolerance: float = 1e-6, timeout_s: float = 5.0):
        if answer_format not in typing.get_args(AnswerFormat):
            raise ValueError(
                f"math_equivalence: answer_format={answer_format!r} is not valid; use one of "
                f"{', '.join(typing.get_args(AnswerFormat))}."
            )
        if not tolerance >= 0:
            raise ValueError(f"math_equivalence: tolerance={tolerance!r} must be >= 0 (a relative tolerance).")
        if not timeout_s > 0:
            raise ValueError(f"math_equivalence: timeout_s={timeout_s!r} must be > 0 seconds.")
        self.answer_format = answer_format
        self.tolerance = tolerance
        self.timeout_s = timeout_s
        self._counts = dict.fromkeys(["scored", *_OUTCOME_COUNTERS.values()], 0)
        self.answers = AnswerColumn("math_equivalence")

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], answer: Sequence[Any] | None = None, **columns: Any
    ) -> list[float | None]:
        return self.score(completions, self.answers.read(answer, len(completions), columns))

    def score(self, completions: Sequence[Any], references: Sequence[str | None]) -> list[float | None]:
        """Rewards of ``completions`` against reference answers already read as text (None: not applicable)."""
        rewards: list[float | None] = []
        for completion, reference in zip(completions, references, strict=True):
            if reference is None:
                rewards.append(None)
                continue
            if "\\boxed" in reference or "####" in reference:
                reference = extract_answer(reference) or reference
            predicted = extract_answer(completion_text(completion), answer_format=self.answer_format)
            if predicted is None:
                outcome: MathOutcome = "no_answer"
            else:
                outcome = compare_math_answers(predicted, reference, tolerance=self.tolerance, timeout_s=self.timeout_s)
            self._counts["scored"] += 1
            if outcome in _OUTCOME_COUNTERS:
                self._counts[_OUTCOME_COUNTERS[outcome]] += 1
            rewards.append(float(outcome == "equal"))
        return rewards

    def pop_metrics(self) -> dict[str, float]:
        """Counts since the previous call: ``scored`` completions, and among them ``no_answer``, ``parse_failures``
        (prediction outside the grammar), ``reference_parse_failures``, ``timeouts`` and ``symbolic_errors``; and
        ``bad_answer``: rows whose reference answer was not usable (not scored)."""
        counts, self._counts = self._counts, dict.fromkeys(self._counts, 0)
        return {key: float(value) for key, value in counts.items()} | self.answers.pop_metrics()


def math_equivalence(
    prompts: Sequence[str],
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    *,
    answer_format: AnswerFormat = "auto",
    tolerance: float = 1e-6,
    timeout_s: float = 5.0,
    **columns: Any,
) -> list[float | None]:
    """:class:`MathEquivalence` as a plain function (no counters), for direct calls."""
    reward = MathEquivalence(answer_format=answer_format, tolerance=tolerance, timeout_s=timeout_s)
    references = [answer_text(v) for v in check_column("answer", answer, len(completions), "math_equivalence")]
    return reward.score(completions, references)
