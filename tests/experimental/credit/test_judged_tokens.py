"""Credit from a token judge (:mod:`genalign.experimental.credit.judged_tokens`): judged token rewards ([155], [205],
[224]), MRPO's exponentially larger penalties on earlier invalid steps of wrong answers ([169]) and TLPO's localized
suppression ([105]), against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.judged_tokens import early_step_penalties

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]])
# sample 0: a minor error at token 1 and a major one at token 4; sample 1: an error at token 0 (and judge noise on
# padding, which must be ignored)
JUDGED = torch.tensor([[0.0, -1.0, 0.0, 0.0, -5.0, 0.0], [-1.0, 0.0, 0.0, 0.0, -3.0, -3.0]])
# steps: sample 0 = [0, 0 | 1, 1 | 2, 2], sample 1 = [0 | 1, 1 | 2] (padding continues the last step)
SEGMENTS = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 2]])


def batch(reward: list[float] | None = None) -> StepBatch:
    values = {"mask": MASK, "token_judgement": JUDGED, "segment_ids": SEGMENTS}
    if reward is not None:
        values["combined_reward"] = torch.tensor(reward)
    return StepBatch(**values)


def test_judged_token_rewards_add_the_weighted_judgement():
    advantages = torch.tensor([[1.0] * 6, [-1.0] * 6], dtype=F64)
    out = CREDIT_RULES.get("judged_token_rewards")(advantages, batch(), weight=0.5)
    expected = torch.tensor([[1.0, 0.5, 1.0, 1.0, -1.5, 1.0], [-1.5, -1.0, -1.0, -1.0, -1.0, -1.0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(CREDIT_RULES.get("judged_token_rewards")(advantages, batch(), weight=0.0), advantages)
    with pytest.raises(ValueError, match=r"weight=-1 must be >= 0"):
        CREDIT_RULES.get("judged_token_rewards")(advantages, batch(), weight=-1)


def test_earlier_invalid_steps_of_wrong_answers_cost_exponentially_more():
    # sample 0: steps 0 and 2 invalid -> the 1st invalid step costs λ, the 2nd λγ; step 1 is valid
    penalties = early_step_penalties(JUDGED.double(), SEGMENTS, MASK > 0, penalty=0.8, decay=0.25)
    torch.testing.assert_close(
        penalties, torch.tensor([[0.8, 0.8, 0.0, 0.0, 0.2, 0.2], [0.8, 0, 0, 0, 0, 0]], dtype=F64)
    )
    advantages = torch.tensor([[-1.0] * 6, [0.5] * 6], dtype=F64)
    both_wrong = CREDIT_RULES.get("early_step_penalty")(advantages, batch([0.0, 0.0]), penalty=0.8, decay=0.25)
    torch.testing.assert_close(both_wrong, advantages - penalties)
    # a correct answer (reward >= 1) keeps its advantages whatever its steps hold
    one_right = CREDIT_RULES.get("early_step_penalty")(advantages, batch([0.0, 1.0]), penalty=0.8, decay=0.25)
    torch.testing.assert_close(one_right[1], advantages[1])
    torch.testing.assert_close(one_right[0], advantages[0] - penalties[0])
    with pytest.raises(ValueError, match="0 < decay <= 1"):
        CREDIT_RULES.get("early_step_penalty")(advantages, batch([0.0, 0.0]), decay=0.0)


def test_localized_suppression_moves_only_the_error_tokens():
    advantages = torch.tensor([[2.0] * 6, [-1.0] * 6], dtype=F64)
    out = CREDIT_RULES.get("localized_suppression")(advantages, batch(), strength=0.5)
    expected = torch.tensor([[0.0, -0.5, 0.0, 0.0, -0.5, 0.0], [-0.5, 0.0, 0.0, 0.0, -1.0, -1.0]], dtype=F64)
    torch.testing.assert_close(out, expected)  # padding keeps its incoming values
    kept = CREDIT_RULES.get("localized_suppression")(advantages, batch(), strength=0.5, sequence_weight=0.5)
    torch.testing.assert_close(kept[0], torch.tensor([1.0, -0.5, 1.0, 1.0, -0.5, 1.0], dtype=F64))
    with pytest.raises(ValueError, match="strength > 0"):
        CREDIT_RULES.get("localized_suppression")(advantages, batch(), strength=0.0)
