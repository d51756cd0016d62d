"""Rewards of the ``arithmetic_chain`` procedural task (:mod:`genalign.data.chains`), from its exact checker.

- ``chain_answer``: 1.0 where the completion's last line is ``A:<the right answer>``, else 0.0 (outcome reward);
- ``chain_progress``: the share of the chain's steps that the completion gets right, counted from the first line and
  stopping at the first wrong one (a partial-progress reward; both short and long step forms count).

Both read the problem from the prompt itself (no column needed), so they also score prompts written by hand; a prompt
that is not a chain gets ``None`` (not applicable).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genalign.data.chains import grade_chain
from genalign.rewards.base import register_reward
from genalign.rewards.inputs import completion_text


def _grades(prompts: Sequence[str], completions: Sequence[Any]):
    grades = []
    for prompt, completion in zip(prompts, completions, strict=True):
        try:
            grades.append(grade_chain(prompt, completion_text(completion)))
        except ValueError:  # not a chain prompt
            grades.append(None)
    return grades


@register_reward("chain_answer", source="rule")
def chain_answer(prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float | None]:
    """1.0 where the last line of the completion is ``A:<answer>`` with the chain's exact value, else 0.0."""
    return [None if g is None else float(g.correct) for g in _grades(prompts, completions)]


@register_reward("chain_progress", source="rule")
def chain_progress(prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float | None]:
    """Share of the chain's steps written right, from the first line up to the first wrong one (0..1)."""
    return [None if g is None else g.progress for g in _grades(prompts, completions)]
