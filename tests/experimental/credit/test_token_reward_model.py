"""OREAL's token-level reward model [147] (``token_reward_head``): hand-computed importance weights, one hand-computed
gradient step of the head on outcome labels, the trained head re-weighting the next step's tokens, state round trip."""

from __future__ import annotations

import json
import math

import pytest
import torch

from genalign.algorithms import StepBatch
from genalign.experimental.credit.token_reward_model import TokenRewardHead, importance_weights
from tests.algorithms.arith_config import arith_lm_config

F64 = torch.float64
UP, DOWN = [3.0, 1.0], [1.0, 3.0]  # standardised: [1, −1] and [−1, 1]


def batch(hidden, rewards, mask=None) -> StepBatch:
    hidden = torch.tensor(hidden)
    mask = torch.ones(hidden.shape[:2]) if mask is None else torch.tensor(mask)
    return StepBatch(hidden=hidden, rewards=torch.tensor(rewards)[:, None], mask=mask,
                     sample_advantages=torch.ones(hidden.shape[0]), group_ids=torch.zeros(hidden.shape[0]).long())  # fmt: skip


def test_importance_weights_credit_success_and_blame_failure():
    scores = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]], dtype=F64)  # σ = 0.5, 0.75
    valid = torch.ones(2, 2, dtype=F64)
    weights = importance_weights(scores, valid, torch.tensor([True, False]), strength=0.5)
    # correct: u = (0.5, 0.75), mean 0.625 → (0.8, 1.2) → 0.5 + 0.5·(…) ; failed: u = (0.5, 0.25), mean 0.375
    expected = torch.tensor([[0.9, 1.1], [0.5 + 0.5 * 4 / 3, 0.5 + 0.5 * 2 / 3]], dtype=F64)
    torch.testing.assert_close(weights, expected)
    padded = importance_weights(scores, torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=F64), torch.tensor([True, True]),
                                strength=1.0)  # fmt: skip
    assert padded[0].tolist() == [1.0, 0.0]  # one valid token: weight 1, padding 0


def test_the_head_learns_from_outcomes_then_weights_the_next_steps_tokens():
    head = TokenRewardHead(strength=0.5, lr=1.0, steps=1)
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=F64)
    first = head(advantages, batch([[UP, UP], [DOWN, DOWN]], [1.0, 0.0]))
    assert torch.equal(first, advantages)  # w = 0 before any outcome: uniform weights
    # σ(0) − y = (−0.5, 0.5); rows (ĥ mean, 1) = (1, −1, 1), (−1, 1, 1): mean gradient (−0.5, 0.5, 0)
    assert head.weight.tolist() == [0.5, -0.5] and head.bias == 0.0
    second = head(torch.ones(1, 2, dtype=F64), batch([[UP, DOWN]], [1.0]))  # s = (1, −1) on a correct sample
    u = torch.sigmoid(torch.tensor([1.0, -1.0], dtype=F64))  # mean 0.5
    torch.testing.assert_close(second[0], 0.5 + 0.5 * u / 0.5)
    fresh = TokenRewardHead(strength=0.5, lr=1.0, steps=1)
    fresh.load_state_dict(json.loads(json.dumps(head.state_dict())))
    assert fresh.state_dict() == head.state_dict()


def test_config_accepts_the_rule_after_oreal_reshaping_and_refuses_bad_values():
    arith_lm_config(advantage="rloo", credit=["outcome_reshaped", "token_reward_head"])
    with pytest.raises(ValueError, match="strength"):
        TokenRewardHead(strength=1.5)
    with pytest.raises(ValueError, match="steps"):
        TokenRewardHead(steps=0)
