"""Part of each group sampled by a fixed smaller model of the same family ([313] S2L-PO): the small model explores
(its rollouts are diverse at the policy level), and its share of the group anneals to 0 so the learner ends on its own
samples. The small model is ``algorithm.teacher`` (``source: model``, the same tokenizer), writing whole completions.
"""

from __future__ import annotations

import math

import torch

from genalign.experimental.sampling.guidance import check_arg
from genalign.experimental.sampling.teacher_writing import TeacherWriting, added_to, teacher_sample
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Forced, Outcome


@SAMPLE_SOURCES.register(
    "small_to_large",
    formula="φ(p) = start_fraction · max(0, 1 − p/anneal_until) at progress p = step/max_steps; per prompt x of G "
    "samples: m = round(φ·G) explorer rollouts y ~ π_small(·|x) and G − m learner samples (the first rollout draws "
    "G − m_0, a top-up round the rest); advantages over the mixed group; ratio πθ/π_small on the explorer's tokens "
    "(off-policy clip)",
    source="[313] S2L-PO",
    summary="Small-to-large: a fixed smaller model writes part of every group early in training instead of the "
    "learner, its share annealed linearly to the learner's own samples; its rollouts train as off-policy samples.",
    off_policy=True,
)
class SmallToLarge(TeacherWriting):
    """[313] S2L-PO: a fixed smaller sampler writes part of each group, annealed to the learner's own sampling.

    At progress ``p = step / max_steps`` the explorer's share is ``φ = start_fraction · max(0, 1 − p / anneal_until)``;
    each prompt's group of ``G`` (``algorithm.group_size``) is ``m = round(φ·G)`` completions written by the explorer
    (``algorithm.teacher``, ``source: model``: the smaller model, same tokenizer) and ``G − m`` sampled by the learner.
    The learner's own sampling is what S2L-PO saves: the step's first rollout draws only ``G − m_0`` samples per prompt
    (``m_0 = round(start_fraction·G)``, at most ``G − 1``), and an extra sampling round tops each group up to ``G − m``
    learner samples as the share anneals (no top-up at the start; ``m_0 − m`` more per prompt later; the whole group
    once ``φ = 0``). Rewards are computed like any sample's; the explorer's tokens keep its sampling log-probs, so the
    off-policy clip [323] (required) weighs them by ``πθ/π_small``.

    Reading chosen: the abstract names "a progressive annealing strategy that transitions from offline small-model
    rollouts to the large learner's own sampling" without its schedule; genalign anneals the explorer's share of
    each group linearly over ``[0, anneal_until]`` of the run and has the small model write online, in the step (no
    offline pool).

    Args:
        start_fraction: the explorer's share of each group at the start, in (0, 1].
        anneal_until: the progress at which the share reaches 0, in (0, 1].
    """

    rounds = 2  # the first rollout (the learner's smallest share) and one top-up round

    def __init__(self, *, start_fraction: float = 0.5, anneal_until: float = 0.5) -> None:
        check_arg("start_fraction", 0.0 < start_fraction <= 1.0, start_fraction, "must be in (0, 1]")
        check_arg("anneal_until", 0.0 < anneal_until <= 1.0, anneal_until, "must be in (0, 1] (a share of the run)")
        self.start_fraction, self.anneal_until = start_fraction, anneal_until
        self.group_size = 0  # set by samples_per_prompt when the stage is built

    def share(self, progress: float) -> float:
        """``φ(p)``: the explorer's share of each group at progress ``p``."""
        return self.start_fraction * max(0.0, 1.0 - progress / self.anneal_until)

    def explorer_count(self, progress: float) -> int:
        """``m = round(φ(p)·G)``, at most ``G − 1`` (the learner keeps one sample of every group)."""
        return min(round(self.share(progress) * self.group_size), self.group_size - 1)

    def samples_per_prompt(self, group_size: int) -> int:
        self.group_size = group_size
        return group_size - self.explorer_count(0.0)

    def _learner_samples(self, outcome: Outcome) -> dict[int, int]:
        """The learner's samples drawn so far, by stream position."""
        forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
        counts: dict[int, int] = {}
        for position, is_forced in zip(outcome.positions.tolist(), forced.tolist(), strict=True):
            counts[position] = counts.get(position, 0) + (not is_forced)
        return counts

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        target = self.group_size - self.explorer_count(outcome.progress)
        wanted = {p: target - drawn for p, drawn in self._learner_samples(outcome).items()}
        return {p: count for p, count in wanted.items() if count > 0}

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        m = self.explorer_count(outcome.progress)
        return [teacher_sample(p, "explorer") for p in sorted(self._learner_samples(outcome)) for _ in range(m)]

    def after_rewards(self, outcome: Outcome) -> Decision:
        explored = added_to(outcome, set(self._learner_samples(outcome)))  # [N]
        rewards = outcome.rewards[explored]
        return Decision(stats={
            "share": self.share(outcome.progress), "explorer_samples": float(explored.sum()),
            "learner_samples": float(len(outcome) - int(explored.sum())),
            "explorer_reward_mean": float(rewards.nanmean()) if len(rewards) else math.nan,
        })  # fmt: skip
