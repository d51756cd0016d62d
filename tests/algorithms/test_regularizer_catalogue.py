"""Regularisers of the method catalogue, future-KL shaping and majority boosting: hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import ADVANTAGE_ESTIMATORS, REGULARIZERS, RegularizerInputs, future_kl_advantages

F64 = torch.float64


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_likelihood_preserving_only_where_the_trajectory_fell():
    old = t([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]])
    logp = (old + t([[-0.2, 0.1], [-0.1, 0.3], [-0.2, 0.1]])).requires_grad_(True)
    inputs = RegularizerInputs(logp=logp, mask=torch.ones(3, 2), old_logp=old, advantages=t([1.0, 1.0, -1.0]))
    penalty = REGULARIZERS.get("likelihood_preserving")(inputs)
    torch.testing.assert_close(penalty.detach(), t([[0.2, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    (grad,) = torch.autograd.grad(penalty.sum(), logp)
    torch.testing.assert_close(grad, t([[-1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    everywhere = REGULARIZERS.get("likelihood_preserving")(inputs, only_positive=False)
    torch.testing.assert_close(everywhere.detach(), t([[0.2, 0.0], [0.0, 0.0], [0.2, 0.0]]))


def test_entropy_split_kl_scales():
    inputs = RegularizerInputs(logp=t([[0.0, 0.0]]), mask=torch.ones(1, 2), kl=t([[1.0, 2.0]]), entropy=t([[0.2, 1.0]]))
    torch.testing.assert_close(REGULARIZERS.get("entropy_split_kl")(inputs), t([[1.5, 1.0]]))


def test_mastery_hinge_kl_only_on_mastered_groups():
    old = t([[0.0], [0.0]]) - 1.0
    logp = old + 0.5
    inputs = RegularizerInputs(logp=logp, mask=torch.ones(2, 1), old_logp=old, group_success=t([1.0, 0.5]))
    k3 = math.exp(-0.5) + 0.5 - 1.0
    torch.testing.assert_close(REGULARIZERS.get("mastery_hinge_kl")(inputs, margin=0.01), t([[k3 - 0.01], [0.0]]))


def test_low_probability_kl_to_the_filtered_proxy():
    logits = torch.log(t([[[0.7, 0.29, 0.01]]])).requires_grad_(True)
    inputs = RegularizerInputs(logp=t([[0.0]]), mask=torch.ones(1, 1), logits=logits)
    loss = REGULARIZERS.get("low_probability")(inputs, noise_ratio=0.02)  # 0.01 < 0.02 · 0.7: filtered
    torch.testing.assert_close(loss.detach(), t([[-math.log(0.99)]]))  # q = π/Z on kept tokens: KL = −log Z
    with pytest.raises(ValueError, match=r"needs RegularizerInputs\.logits"):
        REGULARIZERS.get("low_probability")(RegularizerInputs(logp=t([[0.0]]), mask=torch.ones(1, 1)))


def test_distribution_entropy_kl_to_the_tempered_policy():
    logits = torch.log(t([[[0.25, 0.75]]]))
    inputs = RegularizerInputs(logp=t([[0.0]]), mask=torch.ones(1, 1), logits=logits)
    q = [1 / (1 + math.sqrt(3)), math.sqrt(3) / (1 + math.sqrt(3))]  # softmax(z / 2)
    expected = q[0] * math.log(q[0] / 0.25) + q[1] * math.log(q[1] / 0.75)
    torch.testing.assert_close(REGULARIZERS.get("distribution_entropy")(inputs, temperature=2.0), t([[expected]]))
    torch.testing.assert_close(REGULARIZERS.get("distribution_entropy")(inputs, temperature=1.0), t([[0.0]]))


def test_future_kl_return_to_go():
    kl = t([[0.1, 0.2, 0.3]])
    torch.testing.assert_close(future_kl_advantages(t([1.0]), kl, torch.ones(1, 3), coef=0.5), t([[0.7, 0.75, 0.85]]))
    shaped = future_kl_advantages(t([1.0]), kl, torch.tensor([[1, 1, 0]]), coef=0.5)
    torch.testing.assert_close(shaped, t([[0.85, 0.9, 0.0]]))


def test_majority_boosted_weights_majority_correct_groups():
    rewards, groups = t([1, 1, 1, 0, 1, 0]), torch.tensor([0, 0, 0, 0, 1, 1])
    base = ADVANTAGE_ESTIMATORS.get("grpo")(rewards, groups)
    got = ADVANTAGE_ESTIMATORS.get("majority_boosted")(rewards, groups, boost=0.5)
    torch.testing.assert_close(got, base * t([1.5] * 4 + [1.0] * 2))
