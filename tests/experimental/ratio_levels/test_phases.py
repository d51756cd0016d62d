"""F-GRPO's two-phase sequence-level objective [303] (ratio level ``phase``), hand-computed: one length-normalised
ratio per phase (text block) of a completion, clipped once per phase."""

from __future__ import annotations

import math

import torch

from genalign.algorithms import RATIO_LEVELS, StepBatch, policy_loss

F64 = torch.float64


def run(log_ratio, advantages, block_ids, mask=None):
    log_ratio = torch.tensor(log_ratio, dtype=F64)
    logp = log_ratio.clone().requires_grad_(True)
    mask = torch.ones_like(log_ratio) if mask is None else torch.tensor(mask, dtype=F64)
    loss, _ = policy_loss(logp, torch.zeros_like(logp), torch.tensor(advantages, dtype=F64), mask,
                          batch=StepBatch(block_ids=torch.tensor(block_ids)), ratio_level="phase", clip="ppo")  # fmt: skip
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach(), grad


def test_each_phase_has_its_own_ratio_and_clip():
    # phase 0 (candidates): mean 0.1 -> e^{0.1} < 1.2, unclipped; phase 1 (ranking): mean 0.3 -> e^{0.3} > 1.2:
    # clipped for a positive advantage (loss −1.2·A, no gradient)
    loss, grad = run([[0.0, 0.2, 0.5, 0.1]], [[1.0, 1.0, 2.0, 2.0]], [[0, 0, 1, 1]])
    torch.testing.assert_close(loss, torch.tensor([[-math.exp(0.1)] * 2 + [-1.2 * 2.0] * 2], dtype=F64))
    torch.testing.assert_close(grad, torch.tensor([[-math.exp(0.1)] * 2 + [0.0, 0.0]], dtype=F64))  # spread over it


def test_a_completion_without_a_marker_is_one_phase_and_padding_is_left_out():
    loss, _ = run([[0.1, 0.2, 9.0]], [[1.0, 1.0, 1.0]], [[0, 0, 0]], mask=[[1.0, 1.0, 0.0]])
    torch.testing.assert_close(loss[0, :2], torch.tensor([-math.exp(0.15)] * 2, dtype=F64))  # the sequence ratio


def test_the_level_asks_for_block_ids_and_is_the_sequence_level_without_them():
    assert RATIO_LEVELS.meta("phase")["needs"] == ("block_ids",)  # the trainer asks the family for them
    logp = torch.tensor([[0.0, 0.2, 0.5, 0.1]], dtype=F64)
    ones = torch.ones(1, 4, dtype=F64)
    direct, _ = policy_loss(logp, torch.zeros_like(logp), ones, ones, batch=StepBatch(), ratio_level="phase",
                            clip="none")  # fmt: skip
    torch.testing.assert_close(direct, torch.full((1, 4), -math.exp(0.2), dtype=F64))  # one phase: exp(mean ℓ)
