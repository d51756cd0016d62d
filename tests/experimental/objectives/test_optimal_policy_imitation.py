"""Inverse-Q* [188] against hand-computed values: per token, the cross-entropy of the DPO-style comparison σ(β h_t)
of the policy with the reference against the estimated optimal policy's preference σ(β r*_t), r*_t the self teacher's
log-ratio to the reference; minimal where the implicit token reward equals the estimated optimal one."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch
from tests.algorithms.test_objectives_preference import close, sigmoid, softplus


def inverse_q(logp, ref, teacher, scored, mask=None, **hp):
    logp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(logp) if mask is None else torch.tensor(mask, dtype=torch.float64)
    batch = StepBatch(mask=mask, group_ids=torch.arange(logp.shape[0]), ref_logp=torch.tensor(ref, dtype=torch.float64),
                      teacher_action_logp=torch.tensor(teacher, dtype=torch.float64),
                      teacher_scored=torch.tensor(scored))  # fmt: skip
    loss, metrics = OBJECTIVES.get("inverse_q")(ScoreOutput(logp=logp), torch.zeros(logp.shape[0]), batch, **hp)
    return logp, loss, metrics


def test_each_token_is_a_bradley_terry_comparison_labelled_by_the_estimated_optimal_policy():
    beta = 0.5
    # h = (0.5, −1), r* = (2, −0.5); the second sample is unscored, the last action of the first is padding
    logp, loss, metrics = inverse_q([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]], [[-1.5, -1.0, 0.0], [0.0, 0.0, 0.0]],
                                    [[0.5, -1.5, 9.0], [5.0, 5.0, 5.0]], [True, False], mask=[[1, 1, 0], [1, 1, 1]],
                                    beta=beta)  # fmt: skip
    expected = []
    for h, r in ((0.5, 2.0), (-1.0, -0.5)):
        q = sigmoid(beta * r)
        expected.append(q * softplus(-beta * h) + (1 - q) * softplus(beta * h))
    close(loss, [[expected[0], expected[1], 0.0], [0.0, 0.0, 0.0]])
    close(metrics["inverse_q/optimal_reward"], (2.0 - 0.5) / 2)
    close(metrics["inverse_q/agreement"], 1.0)
    loss.sum().backward()
    # dℓ/dh = β(σ(βh) − q): raised where π* prefers the token more than the policy does, lowered otherwise
    close(logp.grad, [[beta * (sigmoid(beta * 0.5) - sigmoid(beta * 2.0)),
                       beta * (sigmoid(-beta) - sigmoid(-beta * 0.5)), 0.0], [0.0, 0.0, 0.0]])  # fmt: skip


def test_the_loss_is_minimal_where_the_implicit_reward_equals_the_optimal_one():
    values = []
    for h in (0.5, 1.0, 1.5):
        _, loss, _ = inverse_q([[-2.0 + h]], [[-2.0]], [[-1.0]], [True], beta=1.0)
        values.append(float(loss.detach()))
    assert values[1] < values[0] and values[1] < values[2]  # r* = 1
    _, loss, metrics = inverse_q([[-1.0]], [[-1.0]], [[30.0]], [True], beta=1.0, max_reward=2.0)
    close(loss, [[sigmoid(2.0) * math.log(2) + (1 - sigmoid(2.0)) * math.log(2)]])  # h = 0: log 2 whatever q
    close(metrics["inverse_q/optimal_reward"], 2.0)  # clipped
    with pytest.raises(ValueError, match=r"max_reward=0.0 must be > 0"):
        inverse_q([[-1.0]], [[-1.0]], [[0.0]], [True], max_reward=0.0)
