"""Draft-then-refine rollouts ([100] iGRPO): the group is trained on refinements of the policy's own best draft.

Stage 1 is the step's rollout: ``drafts`` samples per prompt. The best draft by the same scalar reward (the weighted
reward sum; the first among equals) is decoded and appended to the prompt with ``template`` (guidance ``hint``) for a
second round of ``algorithm.group_size`` samples, the refinements; the drafts leave the groups (``Decision.keep``),
so the GRPO update runs on the draft-conditioned refinements alone. The draft is conditioning, never actions, and
evaluation prompts carry none: the deployed policy answers in one pass.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genalign.experimental.sampling.guidance import check_arg
from genalign.experimental.sampling.rounds import planned_hint, rounds_of
from genalign.experimental.sampling.tokens import PolicyTokens
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Outcome, RuleDefaults


@SAMPLE_SOURCES.register(
    "draft_refinement",
    formula="stage 1: d_1..d_D ~ π(·|x); d* = argmax_j R(x, d_j); stage 2: o_1..o_G ~ π(·|x ⊕ template(d*)); GRPO "
    "over {o_i} with R(x, o_i) (drafts not trained unless train_drafts)",
    source="[100] iGRPO",
    summary="Iterative GRPO: sample drafts, keep the highest-reward one, append it to the prompt and train the group "
    "on the draft-conditioned refinements, so the policy learns to improve on its best attempt.",
)
class DraftRefinement(RuleDefaults):
    """[100] iGRPO: a two-stage rollout with dynamic self-conditioning on the best draft.

    The step's rollout draws ``drafts`` samples per prompt (``samples_per_prompt``); after their rewards each prompt
    gets ``algorithm.group_size`` refinements in a second round, sampled with its best draft appended to the prompt
    (``template``, ``{draft}`` = the draft's text). A prompt whose drafts have no reward uses its first draft. The
    drafts are dropped from the groups (``train_drafts``: kept, in the same group as the refinements).

    Reading chosen: the abstract gives the two stages and the selection by the training reward; the refinement
    prompt's wording (``template``) and ``drafts`` are genalign's choices. The rule decodes the draft itself, so
    ``tokenizer`` names the policy's tokenizer.

    Args:
        tokenizer: the policy's tokenizer (the same value as ``policy.model``).
        drafts: stage-1 samples per prompt (>= 1).
        template: appended to the prompt for the refinements; ``{draft}`` is replaced by the best draft.
        train_drafts: keep the drafts in the groups and the loss.
    """

    needs_tokens = True
    rounds = 2
    needs_guidance = frozenset({"hint"})

    def __init__(
        self, *, tokenizer: str, drafts: int = 4,
        template: str = "\nA previous attempt:\n{draft}\nWrite an improved solution.\n", train_drafts: bool = False,
    ) -> None:  # fmt: skip
        check_arg("drafts", isinstance(drafts, int) and drafts >= 1, drafts, "must be an int >= 1")
        check_arg("template", "{draft}" in template, template, "must contain '{draft}'")
        self.tokens, self.drafts, self.template, self.train_drafts = (
            PolicyTokens(tokenizer, "draft_refinement"), drafts, template, train_drafts)  # fmt: skip
        self.refinements = 0
        self._hints: dict[int, str] = {}  # position -> the hint it was planned with (this step)

    def samples_per_prompt(self, group_size: int) -> int | None:
        self.refinements = group_size
        return self.drafts

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        self._hints |= {candidate.position: planned_hint(candidate.row) for candidate in pool}
        return pool

    def best_drafts(self, outcome: Outcome, drafts: torch.Tensor | None = None) -> dict[int, int]:
        """The best of each prompt's drafts (``drafts`` ``[N]`` bool; None: every sample, as after the first round)
        by stream position, as a sample index of ``outcome`` (the first among equal rewards)."""
        rewards = torch.nan_to_num(outcome.rewards.double(), nan=-math.inf)  # [N]
        best: dict[int, int] = {}
        for i, position in enumerate(outcome.positions.tolist()):
            if drafts is not None and not drafts[i]:
                continue
            if position not in best or rewards[i] > rewards[best[position]]:
                best[position] = i
        return best

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        return {p: self.refinements for p in self.best_drafts(outcome)} if outcome.round == 0 else {}

    def round_guidance(self, outcome: Outcome) -> dict[int, dict[str, Any]]:
        if outcome.round != 0:
            return {}
        guidance = {}
        for position, sample in self.best_drafts(outcome).items():
            draft = self.tokens.decode(outcome.completion(sample)[0]).strip()
            guidance[position] = {"hint": self._hints.get(position, "") + self.template.replace("{draft}", draft)}
        return guidance

    def after_rewards(self, outcome: Outcome) -> Decision:
        rounds = rounds_of(outcome, {p: self.drafts for p in set(outcome.positions.tolist())})  # [N]
        drafts, refinements = rounds == 0, rounds == 1
        best = [float(outcome.rewards[i]) for i in self.best_drafts(outcome, drafts).values()]
        self._hints = {}
        best_mean = sum(best) / len(best) if best else math.nan
        refined_mean = _mean(outcome.rewards[refinements])
        return Decision(keep=None if self.train_drafts else ~drafts, stats={
            "draft_reward": _mean(outcome.rewards[drafts]),
            "best_draft_reward": best_mean,
            "refinement_reward": refined_mean,
            "refinement_gain": refined_mean - best_mean,
        })  # fmt: skip


def _mean(values: torch.Tensor) -> float:
    """The mean of the valid (non-NaN) ``values`` ``[n]``; NaN without any."""
    valid = values[~values.isnan()]
    return float(valid.mean()) if valid.numel() else math.nan
