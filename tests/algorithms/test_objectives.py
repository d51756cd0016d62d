"""The objective registry: one signature for the ratio, likelihood-weighted and likelihood-free objectives; wd1's
ratio-free weighted likelihood and the SPG objective checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch, policy_loss
from genalign.algorithms.objectives import group_softmax, spg_loss, wd1_loss


def test_group_softmax_normalises_within_each_group():
    weights = group_softmax(torch.tensor([0.0, math.log(3.0), 5.0, 5.0]), torch.tensor([0, 0, 1, 1]))
    assert torch.allclose(weights, torch.tensor([0.25, 0.75, 0.5, 0.5]))


def test_wd1_weights_are_positive_minus_negative_group_softmax():
    logp = torch.tensor([[-1.0], [-2.0], [-3.0], [-4.0]], requires_grad=True)
    advantages = torch.tensor([math.log(3.0), 0.0, 1.0, 1.0])
    loss, metrics = wd1_loss(logp, logp.detach(), advantages, torch.ones(4, 1), group_ids=torch.tensor([0, 0, 1, 1]))
    # group 0: w+ = (3/4, 1/4), w- = (1/4, 3/4) -> w = (1/2, -1/2); group 1: equal advantages -> w = 0
    expected_weight = torch.tensor([0.5, -0.5, 0.0, 0.0])
    assert torch.allclose(loss[:, 0], -expected_weight * logp.detach()[:, 0])
    loss.sum().backward()
    assert torch.allclose(logp.grad[:, 0], -expected_weight)
    assert metrics["weight_mean_abs"].item() == pytest.approx(0.25)


def test_wd1_temperature_and_negative_weight():
    logp = torch.zeros(2, 1, requires_grad=True)
    loss, _ = wd1_loss(
        logp,
        logp.detach(),
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 1),
        group_ids=torch.tensor([0, 0]),
        temperature=2.0,
        negative_weight=0.0,
    )
    loss.sum().backward()
    w_plus = torch.softmax(torch.tensor([0.5, -0.5]), dim=0)
    assert torch.allclose(logp.grad[:, 0], -w_plus)
    with pytest.raises(ValueError, match="temperature=0"):
        wd1_loss(logp, logp, torch.zeros(2), torch.ones(2, 1), group_ids=torch.tensor([0, 0]), temperature=0)


def test_spg_uses_the_lower_bound_for_positive_and_the_upper_for_negative_advantages():
    logp = torch.tensor([[-1.0, -0.5], [-2.0, -1.5]], requires_grad=True)
    advantages = torch.tensor([2.0, -3.0])
    loss, metrics = spg_loss(logp, logp.detach(), advantages, torch.ones(2, 2), group_ids=torch.tensor([0, 0]))
    assert torch.allclose(loss, torch.tensor([[-2.0, 0.0], [0.0, 3.0]]))  # −A · ratio(=1) on the chosen column
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, 0.0], [0.0, 3.0]]))
    assert metrics["frac_upper_bound"].item() == 0.5
    with pytest.raises(ValueError, match=r"needs logp of shape \[N, 2\]"):
        spg_loss(logp[:, :1], logp[:, :1], advantages, torch.ones(2, 1), group_ids=torch.tensor([0, 0]))


def test_registry_holds_every_objective_with_one_signature():
    assert OBJECTIVES.names() == [
        "cita", "clipped_ratio", "conspo", "constrained_dpo", "disco", "group_dpo", "gvpo", "inverse_q", "lopti",
        "mipo", "nft", "p3o", "plackett_luce", "ra_dpo", "reg_grpo", "sem_dpo", "spg", "t_reg", "tdpo", "tdpo_exact",
        "trpa", "wd1",
    ]  # fmt: skip
    logp = torch.tensor([[-1.0, -0.5], [-2.0, -1.5]], requires_grad=True)
    old, mask, groups = logp.detach() - 0.1, torch.ones(2, 2), torch.tensor([0, 0])
    advantages = torch.tensor([2.0, -3.0])
    context = StepBatch(old_logp=old, mask=mask, group_ids=groups)
    loss, _ = OBJECTIVES.get("clipped_ratio")(ScoreOutput(logp=logp), advantages, context, eps_low=0.2, eps_high=0.2)
    expected, _ = policy_loss(logp, old, advantages, mask, eps_low=0.2, eps_high=0.2)
    assert torch.equal(loss, expected)
    loss, _ = OBJECTIVES.get("wd1")(ScoreOutput(logp=logp), advantages, context, temperature=2.0)
    assert torch.equal(loss, wd1_loss(logp, old, advantages, mask, group_ids=groups, temperature=2.0)[0])
    loss, _ = OBJECTIVES.get("spg")(ScoreOutput(logp=logp), advantages, context)
    assert torch.equal(loss, spg_loss(logp, old, advantages, mask, group_ids=groups)[0])
    with pytest.raises(ValueError, match=r"needs the signal 'old_logp'"):
        OBJECTIVES.get("clipped_ratio")(ScoreOutput(logp=logp), advantages, StepBatch(mask=mask))
    assert OBJECTIVES.meta("nft")["needs"] == ("velocity",) and OBJECTIVES.meta("clipped_ratio")["ratio"]
