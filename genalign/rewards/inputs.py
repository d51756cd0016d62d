"""What text rewards read: a prompt's text (:func:`prompt_text`), a completion's text (:func:`completion_text`), a
dataset column checked against the batch (:func:`check_column`) and a column of reference answers
(:class:`AnswerColumn`)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from genalign.data.errors import LOCATION_KEY, row_location


def prompt_text(row: dict[str, Any]) -> str:
    """The prompt as text: the string itself, or the text of the last user message of a chat prompt."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt):
        if message.get("role") == "user":
            content = message.get("content", "")
            if isinstance(content, str):
                return content
            return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def completion_text(completion: Any) -> str:
    """The text of a completion: the string itself, or the ``content`` of the last chat message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        if isinstance(content, str):
            return content
    raise TypeError(
        f"a text reward needs a string completion or a list of chat messages ending in one with string 'content'; "
        f"got {type(completion).__name__} {completion!r:.80}"
    )


def check_column(name: str, values: Sequence[Any] | None, count: int, reward: str) -> Sequence[Any]:
    """``values`` of the dataset column ``name``, after checking that reward ``reward`` got one per completion."""
    if values is None:
        raise ValueError(
            f"reward {reward!r} needs the dataset column {name!r}; add it to the data or map it with "
            f"data.columns.{name}=<your column>."
        )
    if len(values) != count:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {count} completions.")
    return values


def answer_text(value: Any) -> str | None:
    """A reference answer as text: a string as it is, an integer or a finite float written out (``4`` -> ``"4"``);
    None for what is not an answer: null, true/false, NaN, a list, a dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    return None


class AnswerColumn:
    """A reward's column of reference answers, read row by row with :func:`answer_text`.

    A row whose answer is not text or a number (null, a list, a dict, true/false) gets None -- not applicable: no
    reward and no gradient from this reward -- instead of a silent 0. Such rows are counted (:meth:`pop_metrics` ->
    ``bad_answer``, logged as ``reward/<label>/bad_answer``) and the first one is named once on stderr with where it
    was read (``data.jsonl, line 7``).
    """

    def __init__(self, reward: str, column: str = "answer") -> None:
        self.reward, self.column = reward, column
        self.bad = 0
        self.warned = False

    def read(self, values: Sequence[Any] | None, count: int, columns: Mapping[str, Any]) -> list[str | None]:
        """The answers of the batch as text (None for bad ones); ``columns`` may hold the rows' locations."""
        values = check_column(self.column, values, count, self.reward)
        locations = columns.get(LOCATION_KEY)
        texts = [answer_text(value) for value in values]
        for index, (value, text) in enumerate(zip(values, texts, strict=True)):
            if text is not None:
                continue
            self.bad += 1
            if not self.warned:
                self.warned = True
                location = locations[index] if locations is not None and len(locations) == count else None
                where = row_location({LOCATION_KEY: location}, index)
                print(
                    f"genalign: warning: reward {self.reward!r}: {where}: column {self.column!r} holds "
                    f"{value!r:.60}, which is not a text or number answer; such rows are not scored (no reward, no "
                    f"gradient) and counted as reward/<label>/bad_answer. Fix the data, or map the right column with "
                    f"data.columns.{self.column}=<column>. (Warned once.)",
                    file=sys.stderr,
                    flush=True,
                )
        return texts

    def pop_metrics(self) -> dict[str, float]:
        """``{"bad_answer": rows since the previous call whose answer was not usable}``."""
        bad, self.bad = self.bad, 0
        return {"bad_answer": float(bad)}
