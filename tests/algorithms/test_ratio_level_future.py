"""FIPO [316] (ratio level ``future_influence``): discounted future sums of the token log-ratios, the clipped influence
weights, the safety cap and the filter, against hand-computed values; at the first inner step it is GRPO."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import policy_loss
from genalign.algorithms.ratio_levels.future import discounted_future_sum, influence_weights
from tests.algorithms.arith_config import arith_lm_config


def weights(log_ratio, advantages=None, **hp):
    log_ratio = torch.tensor([log_ratio], dtype=torch.float64)
    advantages = torch.ones_like(log_ratio) if advantages is None else torch.tensor([advantages], dtype=torch.float64)
    settings = {"decay_rate": 1.0, "influence_clip": None, "clip_high_only": True, "safety_threshold": None,
                "filter_ratio": None} | hp  # fmt: skip
    return influence_weights(log_ratio, advantages, torch.ones_like(log_ratio), **settings)[0].tolist()


def test_discounted_future_sum_matches_a_loop_across_chunks():
    values = torch.randn(3, 10, dtype=torch.float64)
    gamma = 0.7
    expected = torch.zeros_like(values)
    running = torch.zeros(3, dtype=torch.float64)
    for t in reversed(range(10)):
        running = values[:, t] + gamma * running
        expected[:, t] = running
    torch.testing.assert_close(discounted_future_sum(values, gamma, chunk_size=3), expected)


def test_influence_weights_match_hand_values():
    # decay_rate 1 -> γ = 1/2; ratios (2, 0.5): F0 = ln 2 + ½ ln ½ = ½ ln 2 -> √2; F1 = ln ½ -> ½
    assert weights([math.log(2.0), math.log(0.5)]) == pytest.approx([math.sqrt(2.0), 0.5])
    assert weights([math.log(2.0), math.log(0.5)], influence_clip=0.2) == pytest.approx([1.2, 1.0])  # [1, 1.2]
    assert weights([math.log(2.0), math.log(0.5)], influence_clip=0.2, clip_high_only=False) == pytest.approx(
        [1.2, 0.8]
    )
    # the filter leaves a token whose ratio exceeds it out of the sum: F0 = 0 + ½ ln 2, F1 = ln 2
    assert weights([math.log(20.0), math.log(2.0)], filter_ratio=10.0) == pytest.approx([math.sqrt(2.0), 2.0])
    # safety: a negative-advantage token with ratio > 4 gets f in [0.8, 1]
    assert weights([math.log(5.0), 0.0], advantages=[-1.0, -1.0], safety_threshold=4.0) == pytest.approx([1.0, 1.0])


def test_surrogate_uses_reweighted_advantages_and_is_grpo_on_policy():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[math.log(1.1), math.log(0.5)]], requires_grad=True)
    loss, _ = policy_loss(logp, old, torch.ones(1), torch.ones(1, 2), ratio_level="future_influence", clip="ppo",
                          decay_rate=1.0, influence_clip=None, eps_low=0.2, eps_high=0.2)  # fmt: skip
    # f0 = exp(ln 1.1 + ½ ln 0.5) = 1.1/√2, f1 = 0.5; token 0: −f0·1.1 (inside the clip); token 1: A·f > 0 and
    # ρ = 0.5 < 0.8 is not clipped for a positive advantage: −0.5·0.5
    torch.testing.assert_close(loss.detach(), torch.tensor([[-1.1 * 1.1 / math.sqrt(2.0), -0.25]]))
    same = torch.zeros(2, 3, requires_grad=True)
    adv = torch.tensor([1.0, -2.0])
    fipo, _ = policy_loss(same, same.detach(), adv, torch.ones(2, 3), ratio_level="future_influence")
    token, _ = policy_loss(same, same.detach(), adv, torch.ones(2, 3), ratio_level="token")
    assert torch.equal(fipo, token)


def test_config_accepts_fipo_on_the_causal_lm():
    config = arith_lm_config(ratio_level={"name": "future_influence", "decay_rate": 32.0}, minibatches=2,
                             clip={"name": "dual_clip", "dual_clip_c": 10.0, "eps_high": 0.28})  # fmt: skip
    assert config.algorithm.objective_kwargs()["decay_rate"] == 32.0
