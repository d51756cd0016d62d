"""RTT's rubric-to-token credit ([274], ``rubric_token_advantages``): per-constraint group advantages spread over
each constraint's relevant tokens with intra-sample token group normalisation, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_RULES, StepBatch
from genalign.experimental.credit.rubric_tokens import constraint_advantages, intra_sample_token_credit

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
# constraint 0 is relevant to tokens 0-1 of sample 0 and token 0 of sample 1; constraint 1 to token 3 of sample 0 only
RELEVANCE = torch.zeros(2, 4, 2)
RELEVANCE[0, :2, 0] = 1.0
RELEVANCE[1, 0, 0] = 1.0
RELEVANCE[0, 3, 1] = 1.0
RELEVANCE[1, 3, 1] = 1.0  # on padding: ignored


def test_constraint_advantages_are_group_relative_per_constraint():
    rewards = torch.tensor([[1.0, 0.0, 5.0], [0.0, float("nan"), 5.0]])
    out = constraint_advantages(rewards, torch.tensor([7, 7]), eps=0.0 + 1e-12)
    # column 0: mean ½, population std ½ -> (1, −1); column 1: one score, std 0 -> 0 and NaN -> 0; column 2: no spread
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]], dtype=F64))


def test_each_constraint_holds_the_same_weight_in_a_sample():
    advantages = torch.tensor([[1.0, -2.0], [-1.0, 2.0]], dtype=F64)
    credit = intra_sample_token_credit(RELEVANCE, advantages, MASK > 0)
    # sample 0 (n = 4, C = 2): constraint 0 over 2 tokens -> 1·4/2/2 = 1 each; constraint 1 over 1 token -> −2·4/1/2
    # sample 1 (n = 2): constraint 0 over 1 token -> −1·2/1/2 = −1; constraint 1 has no relevant token
    torch.testing.assert_close(credit, torch.tensor([[1.0, 1.0, 0.0, -4.0], [-1.0, 0.0, 0.0, 0.0]], dtype=F64))
    assert credit[0].sum() == pytest.approx((1.0 * 4 - 2.0 * 4) / 2)  # Σ_c Â_ic·n_i/C


def test_the_rule_adds_the_constraint_credit_to_the_response_advantage():
    rewards = torch.tensor([[1.0, 0.0, 0.3], [0.0, 1.0, 0.9]])  # constraints are reward columns 0 and 1
    batch = StepBatch(mask=MASK, group_ids=torch.tensor([0, 0]), rewards=rewards, constraint_relevance=RELEVANCE)
    incoming = torch.full((2, 4), 0.5, dtype=F64)
    out = CREDIT_RULES.get("rubric_token_advantages")(incoming, batch, weight=0.5, eps=1e-12)
    # Â = [[1, −1], [−1, 1]] -> u_0 = (1, 1, 0, −2), u_1 = (−1, 0, ·, ·)
    expected = incoming + 0.5 * torch.tensor([[1.0, 1.0, 0.0, -2.0], [-1.0, 0.0, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(out, expected)
    swapped = CREDIT_RULES.get("rubric_token_advantages")(incoming, batch, reward_columns=[1, 0], eps=1e-12)
    torch.testing.assert_close(
        swapped, incoming + 0.5 * torch.tensor([[-1.0, -1.0, 0.0, 2.0], [1.0, 0, 0, 0]]).double()
    )
    with pytest.raises(ValueError, match=r"reward_columns=\[5, 0\] must name one of the 3 reward columns"):
        CREDIT_RULES.get("rubric_token_advantages")(incoming, batch, reward_columns=[5, 0])
