"""What the sample sources whose samples the teacher writes share (``algorithm.teacher``, a ``model`` or ``self``
teacher of a family that hosts ``generate``): the rule flags (``forces``, ``teacher_writes``: config load checks the
teacher), the forced sample the teacher writes after a start (:func:`teacher_sample`), and which samples of an
outcome the rule added (:func:`added_to`).

The teacher samples with the policy's training sampling settings; its tokens keep the teacher's sampling log-probs as
behaviour log-probs, the start's tokens the student's (:class:`~genalign.sampling.base.Forced`), so under the
off-policy clip [323] every token is weighed by the ratio to the policy that wrote it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.sampling.base import Forced, Outcome, RuleDefaults


class TeacherWriting(RuleDefaults):
    """Rules that add samples the teacher writes (module docstring)."""

    forces = True
    teacher_writes = True


def teacher_sample(
    position: int,
    kind: str,
    start: Tensor | None = None,
    start_logp: Tensor | None = None,
    *,
    cap: int | None = None,
    continues: bool = False,
) -> Forced:
    """A forced sample of prompt ``position`` that the teacher writes after ``start`` (``[k]`` action ids with the
    student's behaviour log-probs ``[k]``; None: the teacher writes the whole completion), at most ``cap`` tokens
    (None: to the end), then continued by the policy when ``continues``."""
    if start is None:
        start, start_logp = torch.zeros(0, dtype=torch.long), torch.zeros(0)
    return Forced(position, start.clone(), None if start_logp is None else start_logp.clone(), kind=kind,
                  continues=continues, teacher_writes=True, teacher_tokens=cap)  # fmt: skip


def added_to(outcome: Outcome, positions: set[int] | list[int]) -> Tensor:
    """``[N]`` bool: the forced samples of the prompts at ``positions`` (the rule's own, as long as no other rule
    forces samples into those groups)."""
    forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
    chosen = torch.tensor(sorted(positions), dtype=torch.long)
    return forced & torch.isin(outcome.positions, chosen)


__all__ = ["TeacherWriting", "added_to", "teacher_sample"]
