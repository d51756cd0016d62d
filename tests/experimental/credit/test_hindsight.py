"""HCAPO's hindsight credit at turns [95] (genalign/experimental/credit/hindsight.py), hand-computed: the hindsight
ratio ρ = P(Z | s, a) / P(Z | s) counted over the trajectories of one prompt that share a state and an action."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import StepBatch, apply_credit
from genalign.experimental.credit.hindsight import hindsight_ratios
from tests.experimental.credit.turn_batches import close, t

# four trajectories of one prompt, two turns each (one model token per turn, an environment token after each):
#   turn 0 actions 5, 5, 5, 7; turn 1 actions 8, 8, 9, 8; outcomes (sign of the sample advantage) +, −, −, +
ACTIONS = [[5, 1, 8, 1], [5, 1, 8, 1], [5, 1, 9, 1], [7, 1, 8, 1]]


def batch(sample_advantages=(1.0, -1.0, -1.0, 1.0)) -> StepBatch:
    return StepBatch(
        mask=t([[1, 0, 1, 0]] * 4),
        group_ids=torch.tensor([0, 0, 0, 0]),
        turn_ids=torch.tensor([[0, 0, 1, 1]] * 4),
        action_ids=torch.tensor(ACTIONS),
        sample_advantages=t(list(sample_advantages)),
    )


def test_hindsight_ratio_counts_the_outcome_among_trajectories_with_the_same_state_and_action():
    # turn 0 (state: the prompt, 2 of 4 successes): action 5 -> successes 1/3 -> ρ(s0) = (1/3)/(1/2) = 2/3,
    #   failures 2/3 -> ρ(s1) = ρ(s2) = (2/3)/(1/2) = 4/3; action 7 is seen once -> 1
    # turn 1, state "5" (s0, s1, s2; 1 success): action 8 -> ρ(s0) = (1/2)/(1/3) = 3/2, ρ(s1) = (1/2)/(2/3) = 3/4;
    #   action 9 once -> 1; s3's state "7" is its own -> 1
    actions = [[(5,), (8,)], [(5,), (8,)], [(5,), (9,)], [(7,), (8,)]]
    ratios = hindsight_ratios(actions, [0, 0, 0, 0], [True, False, False, True], min_count=2)
    close(ratios, [[2 / 3, 1.5], [4 / 3, 0.75], [4 / 3, 1.0], [1.0, 1.0]])
    once = hindsight_ratios(actions, [0, 0, 0, 0], [True, False, False, True], min_count=1)
    close(once[3], [2.0, 1.0])  # action 7 once, by a success: P(Z | s, a) = 1 against 1/2
    split = hindsight_ratios(actions, [0, 0, 1, 1], [True, False, False, True], min_count=2)
    close(split, [[1.0, 1.0]] * 4)  # other prompts are other states: (5, +), (5, −) -> 1/2 against 1/2


def test_hcapo_adds_the_hindsight_step_term_to_the_trajectory_advantage():
    # factor 1 + ω·clamp(1 − 1/ρ): s0 (1 − 1/2, 1 + 1/3), s1 (1.25, 2/3), s2 (1.25, 1), s3 (1, 1)
    b = batch()
    out = apply_credit([("hcapo", {})], b["sample_advantages"], b)
    close(out, [[0.5, 1.0, 4 / 3, 1.0], [-1.25, -1.0, -2 / 3, -1.0], [-1.25, -1.0, -1.0, -1.0], [1.0] * 4])
    half = apply_credit([("hcapo", {"coef": 0.5})], b["sample_advantages"], b)
    close(half[0, [0, 2]], [0.75, 7 / 6])
    with pytest.raises(ValueError, match=r"integer min_count >= 1.*min_count=0"):
        apply_credit([("hcapo", {"min_count": 0})], b["sample_advantages"], b)


def test_hcapo_leaves_never_repeated_turns_at_the_trajectory_advantage():
    b = batch().with_values(action_ids=torch.tensor([[1, 0, 5, 0], [2, 0, 6, 0], [3, 0, 7, 0], [4, 0, 8, 0]]))
    out = apply_credit([("hcapo", {})], b["sample_advantages"], b)
    close(out, [[1.0] * 4, [-1.0] * 4, [-1.0] * 4, [1.0] * 4])
