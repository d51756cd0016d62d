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
    "samples: m = round(φ·G) explorer rollouts y ~ π_small(·|x) replace the last m of the learner's; advantages over "
    "the mixed group; ratio πθ/π_small on the explorer's tokens (off-policy clip)",
    source="[313] S2L-PO",
    summary="Small-to-large: a fixed smaller model writes part of every group early in training, its share annealed "
    "linearly to the learner's own samples; its rollouts train as off-policy samples.",
    off_policy=True,
)
class SmallToLarge(TeacherWriting):
    """[313] S2L-PO: a fixed smaller sampler writes part of each group, annealed to the learner's own sampling.

    At progress ``p = step / max_steps`` the explorer's share is ``φ = start_fraction · max(0, 1 − p / anneal_until)``;
    each prompt's group of ``G`` drawn samples gets ``m = round(φ·G)`` completions written by the explorer
    (``algorithm.teacher``, ``source: model``: the smaller model, same tokenizer), which replace the last ``m`` of the
    learner's samples (``Decision.keep``), so the group keeps its size. Rewards are computed like any sample's; the
    explorer's tokens keep its sampling log-probs, so the off-policy clip [323] (required) weighs them by
    ``πθ/π_small``.

    Reading chosen: the abstract names "a progressive annealing strategy that transitions from offline small-model
    rollouts to the large learner's own sampling" without its schedule; genalign anneals the explorer's share of
    each group linearly over ``[0, anneal_until]`` of the run and has the small model write online, in the step (no
    offline pool). The learner still samples its full group first (the sample count is planned before the rule),
    so no rollout compute is saved.

    Args:
        start_fraction: the explorer's share of each group at the start, in (0, 1].
        anneal_until: the progress at which the share reaches 0, in (0, 1].
    """

    def __init__(self, *, start_fraction: float = 0.5, anneal_until: float = 0.5) -> None:
        check_arg("start_fraction", 0.0 < start_fraction <= 1.0, start_fraction, "must be in (0, 1]")
        check_arg("anneal_until", 0.0 < anneal_until <= 1.0, anneal_until, "must be in (0, 1] (a share of the run)")
        self.start_fraction, self.anneal_until = start_fraction, anneal_until

    def share(self, progress: float) -> float:
        """``φ(p)``: the explorer's share of each group at progress ``p``."""
        return self.start_fraction * max(0.0, 1.0 - progress / self.anneal_until)

    def replaced(self, outcome: Outcome) -> dict[int, list[int]]:
        """The learner's samples each prompt's explorer rollouts replace: the last ``round(φ·G)`` drawn."""
        forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
        members: dict[int, list[int]] = {}
        for i, position in enumerate(outcome.positions.tolist()):
            if not forced[i]:
                members.setdefault(position, []).append(i)
        share = self.share(outcome.progress)
        chosen = {p: drawn[len(drawn) - round(share * len(drawn)) :] for p, drawn in members.items()}
        return {p: drawn for p, drawn in chosen.items() if drawn and share > 0}

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        return [teacher_sample(p, "explorer") for p, drawn in self.replaced(outcome).items() for _ in drawn]

    def after_rewards(self, outcome: Outcome) -> Decision:
        replaced = self.replaced(outcome)
        explored = added_to(outcome, set(replaced))  # [N]
        keep = torch.ones(len(outcome), dtype=torch.bool)
        for drawn in replaced.values():
            keep[drawn] = False
        rewards = outcome.rewards[explored]
        return Decision(keep=keep, stats={
            "share": self.share(outcome.progress), "explorer_samples": float(explored.sum()),
            "explorer_reward_mean": float(rewards.nanmean()) if len(rewards) else math.nan,
        })  # fmt: skip
