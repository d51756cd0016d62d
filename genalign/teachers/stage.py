"""The teacher stage of a step (``algorithm.teacher``): the configured teacher judges this process's samples before
their advantages are computed, and its signals join the step batch, where the distillation credit rules read them.
The trainer holds the stage and passes its values on by name without reading them.

The stage asks for the teacher signals the configured options need (producer ``teacher``) plus ``teacher_scored``,
and counts for the step: ``teacher/scored_samples``, ``teacher/skipped_samples`` (a remote teacher's failures: they
get no teacher term) and ``teacher/reverse_kl``, the mean over the scored actions of ``log π_behaviour − log
π_teacher`` (the per-token reverse KL on-policy distillation minimises, [93]), plus the teacher's own counters. A
teacher that only writes (no option reads a teacher signal; sample sources with ``teacher_writes``) judges nothing;
its writing is counted as ``teacher/written_samples`` and ``teacher/written_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from torch import Tensor

from genalign import algorithms as alg
from genalign.policies.base import Policy, Rollout
from genalign.teachers.base import PassCount, Teacher, same_count
from genalign.teachers.build import build_teacher
from genalign.teachers.config import TeacherConfig
from genalign.teachers.context import with_sample_fields


@dataclass
class TeacherStage:
    """The run's teacher and the signals asked of it (build with :meth:`build`)."""

    teacher: Teacher
    wanted: frozenset[str]
    judges: bool = True  # some configured option reads a teacher signal (else the teacher only writes)
    writes: bool = False  # some sample source has the teacher write (its counters are logged every step)
    _counts: dict[str, float] = field(default_factory=dict)

    @classmethod
    def build(
        cls, teacher: TeacherConfig | None, needs: frozenset[str], policy: Policy, batch_size: int, *,
        writes: bool = False,
    ) -> TeacherStage | None:  # fmt: skip
        """The stage of ``algorithm.teacher`` (None without one) for options that need the signals ``needs``
        (``algorithm.needs()``) and, with ``writes``, sample sources that have it write; a model teacher is loaded
        now. ``batch_size``: samples per teacher pass."""
        if teacher is None:
            return None
        read = alg.names_by("teacher", needs)
        built = build_teacher(teacher, policy, batch_size=batch_size)
        return cls(built, read | {"teacher_scored"}, judges=bool(read), writes=writes)

    def judge(
        self, rollout: Rollout, *, passes_everywhere: PassCount = same_count, rewards: Tensor | None = None
    ) -> dict[str, Tensor]:
        """The teacher signals of ``rollout`` (``[n]`` / ``[n, T]``). ``passes_everywhere``: in sharded training the
        trainer's all-reduce max, so that a teacher that runs the policy's modules makes as many passes as the
        busiest process. ``rewards``: the ``[n, K]`` reward table, for the ``{sample.reward}`` placeholders of the
        teacher's context (:func:`~genalign.teachers.context.with_sample_fields`)."""
        if not self.judges:  # a teacher that only writes (sample sources with teacher_writes)
            return {}
        passes = passes_everywhere if self.teacher.shares_policy_modules else same_count
        view = replace(rollout, rows=with_sample_fields(rollout.rows, rollout.outputs, rewards))
        values = self.teacher.judge(view, self.wanted, passes_everywhere=passes)
        scored = values["teacher_scored"]  # [n]
        actions = (rollout.action_mask > 0) & scored[:, None].to(rollout.action_mask.device)  # [n, T]
        gap = (rollout.old_logp.float() - values["teacher_action_logp"].to(rollout.old_logp.device)) * actions
        for key, value in {
            "teacher/scored_samples": float(scored.sum()),
            "teacher/skipped_samples": float((~scored).sum()),
            "teacher/reverse_kl_sum": float(gap.sum()),
            "teacher/scored_actions": float(actions.sum()),
        }.items():
            self._counts[key] = self._counts.get(key, 0.0) + value
        return values

    def write(
        self, rows: list[dict[str, Any]], starts: list[list[int]], caps: list[int | None]
    ) -> list[tuple[list[int], Tensor]]:
        """The teacher's continuations (:meth:`Teacher.write`), counted as ``teacher/written_samples`` and
        ``teacher/written_tokens``."""
        written = self.teacher.write(rows, starts, caps)
        for key, value in {"teacher/written_samples": float(len(written)),
                           "teacher/written_tokens": float(sum(len(ids) for ids, _ in written))}.items():  # fmt: skip
            self._counts[key] = self._counts.get(key, 0.0) + value
        return written

    def take_metrics(self, reduce: Callable[[dict[str, float]], dict[str, float]]) -> dict[str, float]:
        """The step's counters summed over processes by ``reduce`` (the trainer's ``sum_counters``), with the
        reverse-KL sum turned into its mean per scored action."""
        written = dict.fromkeys(("teacher/written_samples", "teacher/written_tokens"), 0.0) if self.writes else {}
        counts, self._counts = {**written, **self._counts, **self.teacher.take_metrics()}, {}
        summed = reduce(counts)
        total, actions = summed.pop("teacher/reverse_kl_sum", 0.0), summed.pop("teacher/scored_actions", 0.0)
        if self.judges:
            summed["teacher/reverse_kl"] = total / actions if actions else float("nan")
        return summed


__all__ = ["TeacherStage"]
