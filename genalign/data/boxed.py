"""The ``\\boxed{...}`` answer of a LaTeX solution: how prepared datasets store a reference answer, and the first
format the answer rewards read (:func:`genalign.rewards.answers.extract_answer`)."""

from __future__ import annotations


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, or None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    index = text.index("{", start) + 1
    depth = 1
    for position in range(index, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[index:position]
    return None  # unbalanced: the model did not close the box
