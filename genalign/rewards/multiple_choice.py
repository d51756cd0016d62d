"""Soft partial credit for multi-choice answers (TW-GRPO [156]): a completion that names a correct subset of the
correct options earns the share of them it names; naming a wrong option earns nothing, so listing every option pays
only when every option is correct."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from genalign.rewards.answers import extract_answer
from genalign.rewards.base import register_reward
from genalign.rewards.inputs import check_column, completion_text

#: what may separate option labels in an answer: whitespace, commas, semicolons, slashes, ``&``, ``+`` and ``and``
SEPARATORS = re.compile(r"(?:[\s,;/&+]|\band\b)+", flags=re.IGNORECASE)


def option_set(text: str, labels: str) -> frozenset[str] | None:
    """The option labels ``text`` names (``"A, C"``, ``"AC"``, ``"(A) and (C)"``), upper-cased; None when a piece of
    it is not made of labels (prose, an unknown label): such an answer is malformed."""
    pieces = [piece.strip("().[]").upper() for piece in SEPARATORS.split(text.strip()) if piece.strip("().[]")]
    if not pieces or any(not piece or any(ch not in labels for ch in piece) for piece in pieces):
        return None
    return frozenset("".join(pieces))


@register_reward("multi_choice_credit", source="[156] TW-GRPO (soft multi-choice reward)")
class MultiChoiceCredit:
    """Partial credit of a multi-choice answer: with ``P`` the options the answer names and ``G`` the correct ones,

        r = |P| / |G|   if ∅ ≠ P ⊆ G,       r = 0   otherwise (a wrong option, no option, or a malformed answer).

    A correct subset earns the share of the correct options it found, a single wrong option voids the answer: a
    policy cannot raise its reward by adding options it is unsure of (listing every option of a question with ``k``
    of ``m`` options correct scores 0 unless ``k = m``). A row whose column holds no option is not applicable (None).

    Reading chosen: the abstract names "soft rewards" that distinguish partial correctness on multi-choice questions
    without their form; genalign credits the found share of a correct subset and gives 0 to any answer with a wrong
    option (the forgery-proof form: partial credit for a superset would pay for guessing).

    Args:
        column: the dataset column with the correct options (``"AC"``, ``"A, C"`` or ``["A", "C"]``).
        labels: the option labels, one character each (upper-case letters or digits).
        answer_format: where the answer is in the completion (:func:`~genalign.rewards.answers.extract_answer`
            formats ``answer_tags`` or ``boxed``), or ``whole`` (the completion's text).
    """

    name = "multi_choice_credit"

    def __init__(self, *, column: str = "answer", labels: str = "ABCDEFGH", answer_format: str = "answer_tags") -> None:
        if not labels.isalnum() or labels != labels.upper() or len(set(labels)) != len(labels):
            raise ValueError(
                f"reward {self.name!r}: labels={labels!r} must be distinct upper-case letters or digits, e.g. 'ABCD'."
            )
        if answer_format not in ("answer_tags", "boxed", "whole"):
            raise ValueError(
                f"reward {self.name!r}: answer_format={answer_format!r} must be 'answer_tags', 'boxed' or 'whole'."
            )
        self.column, self.labels, self.answer_format = column, labels, answer_format

    def correct(self, value: Any) -> frozenset[str] | None:
        """The correct options of a row's column value; None when it names none."""
        if isinstance(value, str):
            return option_set(value, self.labels)
        if isinstance(value, Sequence):
            return option_set(" ".join(str(item) for item in value), self.labels)
        return None

    def chosen(self, completion: Any) -> frozenset[str] | None:
        text = completion_text(completion)
        answer = text if self.answer_format == "whole" else extract_answer(text, answer_format=self.answer_format)
        return None if answer is None else option_set(answer, self.labels)

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        values = check_column(self.column, columns.get(self.column), len(completions), self.name)
        scores: list[float | None] = []
        for completion, value in zip(completions, values, strict=True):
            correct, chosen = self.correct(value), self.chosen(completion)
            if correct is None:
                scores.append(None)
            else:
                scores.append(len(chosen) / len(correct) if chosen and chosen <= correct else 0.0)
        return scores
