"""Where the final answer is in a completion: :func:`extract_answer` (``\\boxed{}``, ``<answer>`` tags, GSM8K
``####`` or the last number)."""

from __future__ import annotations

import re
from typing import Literal

from genalign.data.boxed import last_boxed

__all__ = ["NUMBER", "AnswerFormat", "extract_answer", "last_boxed"]

AnswerFormat = Literal["auto", "boxed", "answer_tags", "last_number"]

#: a number as written in a final answer: ``-1,234.5``, ``3/4``, ``.5``
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def extract_answer(text: str, *, answer_format: AnswerFormat = "auto") -> str | None:
    """The final answer in ``text``, or None if there is none.

    ``"boxed"``: last ``\\boxed{}``; ``"answer_tags"``: last ``<answer>...</answer>``; ``"last_number"``: the last
    number; ``"auto"``: the first of boxed, answer tags, GSM8K's ``#### x`` and the last number that is present
    (a ``\\boxed{`` that is never closed, as in a truncated completion, gives None).
    """
    if answer_format in ("boxed", "auto"):
        boxed = last_boxed(text)
        if boxed is not None or answer_format == "boxed" or "\\boxed{" in text or "\\fbox{" in text:
            return boxed  # an unclosed box (a truncated answer) counts as no answer
    if answer_format in ("answer_tags", "auto"):
        tags = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
        if tags or answer_format == "answer_tags":
            return tags[-1].strip() if tags else None
    if answer_format == "auto" and "####" in text:
        return text.rsplit("####", 1)[1].strip()
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else None
