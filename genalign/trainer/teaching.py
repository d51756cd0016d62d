"""The teacher stage of a step (``algorithm.teacher``): the configured teacher judges this process's samples before
their advantages are computed, and its signals join the step batch, where the distillation credit rules read them.

The stage asks for the teacher signals the configured options need (producer ``teacher``) plus ``teacher_scored``,
and counts for the step: ``teacher/scored_samples``, ``teacher/skipped_samples`` (a remote teacher's failures: they
get no teacher term) and ``teacher/reverse_kl``, the mean over the scored actions of ``log π_behaviour − log
π_teacher`` (the per-token reverse KL on-policy distillation minimises, [93]), plus the teacher's own counters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from genalign import algorithms as alg
from genalign.config import TrainConfig
from genalign.policies.base import Policy, Rollout
from genalign.teachers.base import Teacher, same_count
from genalign.teachers.build import build_teacher
from genalign.trainer.distributed import all_reduce_max


@dataclass
class TeacherStage:
    """The run's teacher and the signals asked of it (build with :meth:`build`)."""

    teacher: Teacher
    wanted: frozenset[str]
    _counts: dict[str, float] = field(default_factory=dict)

    @classmethod
    def build(cls, config: TrainConfig, policy: Policy) -> TeacherStage | None:
        """The stage of ``config.algorithm.teacher`` (None without one); a model teacher is loaded now."""
        cfg = config.algorithm
        if cfg.teacher is None:
            return None
        wanted = alg.names_by("teacher", cfg.needs()) | {"teacher_scored"}
        return cls(build_teacher(cfg.teacher, policy, batch_size=cfg.micro_batch_size), wanted)

    def judge(self, rollout: Rollout, *, lockstep: bool = False) -> dict[str, Tensor]:
        """The teacher signals of ``rollout`` (``[n]`` / ``[n, T]``). ``lockstep``: sharded training, where a teacher
        that runs the policy's modules makes as many passes as the busiest process."""
        passes = all_reduce_max if lockstep and self.teacher.shares_policy_modules else same_count
        values = self.teacher.judge(rollout, self.wanted, passes_everywhere=passes)
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

    def take_metrics(self, reduce: Callable[[dict[str, float]], dict[str, float]]) -> dict[str, float]:
        """The step's counters summed over processes by ``reduce`` (the trainer's ``sum_counters``), with the
        reverse-KL sum turned into its mean per scored action."""
        counts, self._counts = {**self._counts, **self.teacher.take_metrics()}, {}
        summed = reduce(counts)
        total, actions = summed.pop("teacher/reverse_kl_sum", 0.0), summed.pop("teacher/scored_actions", 0.0)
        summed["teacher/reverse_kl"] = total / actions if actions else float("nan")
        return summed


__all__ = ["TeacherStage"]
