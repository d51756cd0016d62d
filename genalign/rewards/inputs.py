"""What text rewards read: a completion's text (:func:`completion_text`) and a dataset column, checked against the
batch (:func:`check_column`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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
