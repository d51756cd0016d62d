"""The step-level ratio of multi-turn rollouts (StepPO [7], ratio level ``turn``), hand-computed: one ratio per model
turn, the environment's tokens outside every mean."""

from __future__ import annotations

import math

import torch

from genalign.algorithms import RATIO_LEVELS, StepBatch, policy_loss

F64 = torch.float64


def test_each_turn_gets_one_ratio_clipped_as_a_whole():
    # turn 0: actions 0, 1 (ℓ 0.1, 0.3 -> mean 0.2); environment token 2 (ℓ 5, masked); turn 1: actions 3, 4 (0.5, 0.7)
    log_ratio = torch.tensor([[0.1, 0.3, 5.0, 0.5, 0.7]], dtype=F64)
    logp = log_ratio.clone().requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]], dtype=F64)
    batch = StepBatch(turn_ids=torch.tensor([[0, 0, 0, 1, 1]]))
    loss, _ = policy_loss(logp, torch.zeros_like(logp), torch.tensor([1.0], dtype=F64), mask, batch=batch,
                          ratio_level="turn", clip="ppo")  # fmt: skip
    (grad,) = torch.autograd.grad((loss * mask).sum(), logp)
    # turn 0: e^{0.2} = 1.221 > 1.2 -> clipped to 1.2 for A > 0 (no gradient); turn 1: e^{0.6} clipped too
    torch.testing.assert_close(loss[0, [0, 1, 3, 4]], torch.tensor([-1.2] * 4, dtype=F64))
    assert bool((grad == 0).all())
    loss, _ = policy_loss(logp, torch.zeros_like(logp), torch.tensor([1.0], dtype=F64), mask, batch=batch,
                          ratio_level="turn", clip="none")  # fmt: skip
    (grad,) = torch.autograd.grad((loss * mask).sum(), logp)
    expected = [-math.exp(0.2), -math.exp(0.2), 0.0, -math.exp(0.6), -math.exp(0.6)]
    torch.testing.assert_close((loss * mask)[0], torch.tensor(expected, dtype=F64))
    torch.testing.assert_close(grad[0], torch.tensor(expected, dtype=F64))  # each turn's gradient over its actions
    assert RATIO_LEVELS.meta("turn")["needs"] == ("turn_ids",)


def test_without_turns_a_completion_is_one_step():
    log_ratio = torch.tensor([[0.1, 0.3, -0.1]], dtype=F64)
    mask = torch.ones_like(log_ratio)
    advantages = torch.tensor([1.0], dtype=F64)
    turn, _ = policy_loss(log_ratio, torch.zeros_like(log_ratio), advantages, mask, ratio_level="turn", clip="none")
    sequence, _ = policy_loss(log_ratio, torch.zeros_like(log_ratio), advantages, mask, ratio_level="sequence",
                              clip="none")  # fmt: skip
    torch.testing.assert_close(turn, sequence)
