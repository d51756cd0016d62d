"""Reward-conditioned groups ([128] RC-GRPO): the samples of one group are drawn under different reward-goal tokens
in the prompt, so a group holds trajectories of distinct quality even when the policy alone would give them all the
same reward.

The group of ``G`` samples is split over the goals (``G // K`` each, the first ``G mod K`` goals one more), one
sampling round per goal: round 0 is the step's rollout under the first goal (guidance ``hint`` attached when the
prompt is planned), each later round draws the next goal's share with that goal in the prompt instead
(:meth:`~genalign.sampling.base.SampleRule.round_guidance`). Every sample is trained conditioned on its own goal
token; the advantages are computed over the whole mixed group.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genalign.experimental.sampling.guidance import attach, check_arg
from genalign.experimental.sampling.rounds import planned_hint
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults


def split_group(group_size: int, parts: int) -> list[int]:
    """``group_size`` samples over ``parts`` goals: ``group_size // parts`` each, the first ``group_size % parts`` one
    more."""
    return [group_size // parts + int(k < group_size % parts) for k in range(parts)]


@SAMPLE_SOURCES.register(
    "reward_goals",
    formula="goals g_1..g_K; the G samples of a prompt x are split n_k = ⌊G/K⌋ (+1 for k ≤ G mod K); o ~ π(·|x ⊕ "
    "template(g_k)) for n_k of them; one GRPO group over all of x's samples",
    source="[128] RC-GRPO (reward-conditioned rollouts within each group)",
    summary="Reward-conditioned GRPO: each group mixes rollouts conditioned on different reward-goal tokens "
    "(<|high_reward|>, <|low_reward|>) in the prompt, which restores within-group reward variation.",
)
class RewardGoals(RuleDefaults):
    """[128] RC-GRPO: diverse reward-goal tokens within each group, one sampling round per goal.

    ``goals`` are texts (usually special tokens the policy was fine-tuned with on mixed-quality trajectories: the
    paper's Reward-Conditioned Trajectory Policy), rendered into the prompt with ``template`` (``{goal}``). Goal
    ``k`` conditions ``n_k`` of each prompt's ``algorithm.group_size`` samples (:func:`split_group`), so every group
    holds every goal. At deployment the prompt carries the high-reward goal; evaluation rows come straight from the
    data, so put it in the evaluation prompts to measure that.

    Reading chosen: the abstract says goal tokens are "sampled" within each group; genalign assigns them in equal
    shares, in order, so that every group is diverse; the goal texts and ``template`` are genalign's defaults. The
    SFT stage that teaches the policy the goals is not part of this rule (start from such a checkpoint).

    Args:
        goals: the reward-goal texts (at least 2, distinct).
        template: how a goal is appended to the prompt (``{goal}``).
    """

    needs_guidance = frozenset({"hint"})

    def __init__(
        self, *, goals: list[str] | None = None, template: str = "\n{goal}",
    ) -> None:  # fmt: skip
        goals = list(goals) if goals is not None else ["<|high_reward|>", "<|low_reward|>"]
        check_arg("goals", len(goals) >= 2 and len(set(goals)) == len(goals) and all(goals), goals,
                  "must be at least 2 distinct non-empty texts")  # fmt: skip
        check_arg("template", "{goal}" in template, template, "must contain '{goal}'")
        self.goals, self.template = goals, template
        self.rounds = len(goals)
        self.shares = [1] * len(goals)
        self._hints: dict[int, str] = {}  # position -> the hint it was planned with (this step)

    def samples_per_prompt(self, group_size: int) -> int | None:
        if group_size < len(self.goals):
            raise ValueError(f"reward_goals: algorithm.group_size = {group_size} is smaller than the {len(self.goals)} "
                             "goals; every group needs a sample of each goal (raise group_size or drop goals)")  # fmt: skip
        self.shares = split_group(group_size, len(self.goals))
        return self.shares[0]

    def render(self, goal: int) -> str:
        return self.template.replace("{goal}", self.goals[goal])

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        self._hints |= {candidate.position: planned_hint(candidate.row) for candidate in pool}
        return [attach(candidate, hint=self.render(0)) for candidate in pool]

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        goal = outcome.round + 1
        return {p: self.shares[goal] for p in set(outcome.positions.tolist())} if goal < len(self.goals) else {}

    def round_guidance(self, outcome: Outcome) -> dict[int, dict[str, Any]]:
        goal = outcome.round + 1
        if goal >= len(self.goals):
            return {}
        return {p: {"hint": self._hints.get(p, "") + self.render(goal)} for p in set(outcome.positions.tolist())}

    def goal_of_samples(self, outcome: Outcome) -> list[int]:
        """The goal of each sample (−1 for a forced one or one beyond the shares), from its rank among its prompt's
        sampled samples (rounds are in outcome order)."""
        forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
        bounds = torch.tensor(self.shares).cumsum(0).tolist()
        seen: dict[int, int] = {}
        goals = []
        for i, position in enumerate(outcome.positions.tolist()):
            if forced[i]:
                goals.append(-1)
                continue
            seen[position] = seen.get(position, 0) + 1
            goals.append(next((k for k, bound in enumerate(bounds) if seen[position] <= bound), -1))
        return goals

    def after_rewards(self, outcome: Outcome) -> Decision:
        goals = torch.tensor(self.goal_of_samples(outcome), dtype=torch.long)  # [N]
        self._hints = {}
        stats = {}
        for k in range(len(self.goals)):
            rewards = outcome.rewards[(goals == k) & ~outcome.rewards.isnan()]
            stats[f"goal{k}_reward"] = float(rewards.mean()) if rewards.numel() else math.nan
        return Decision(stats=stats)
