"""Regularisers of the method catalogue, future-KL shaping and majority boosting: hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import (
    ADVANTAGE_ESTIMATORS,
    REGULARIZERS,
    bind_vocab_term,
)
from genalign.experimental.regularizers.vocabulary import distribution_entropy_term, low_probability_term
from tests.algorithms.regularizer_inputs import regularizer_inputs

F64 = torch.float64


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_likelihood_preserving_only_where_the_trajectory_fell():
    old = t([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]])
    logp = (old + t([[-0.2, 0.1], [-0.1, 0.3], [-0.2, 0.1]])).requires_grad_(True)
    inputs = regularizer_inputs(logp=logp, mask=torch.ones(3, 2), old_logp=old, advantages=t([1.0, 1.0, -1.0]))
    penalty = REGULARIZERS.get("likelihood_preserving")(*inputs)
    torch.testing.assert_close(penalty.detach(), t([[0.2, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    (grad,) = torch.autograd.grad(penalty.sum(), logp)
    torch.testing.assert_close(grad, t([[-1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    everywhere = REGULARIZERS.get("likelihood_preserving")(*inputs, only_positive=False)
    torch.testing.assert_close(everywhere.detach(), t([[0.2, 0.0], [0.0, 0.0], [0.2, 0.0]]))


def test_entropy_split_kl_scales():
    inputs = regularizer_inputs(
        logp=t([[0.0, 0.0]]), mask=torch.ones(1, 2), kl=t([[1.0, 2.0]]), entropy=t([[0.2, 1.0]])
    )
    torch.testing.assert_close(REGULARIZERS.get("entropy_split_kl")(*inputs), t([[1.5, 1.0]]))


def test_mastery_hinge_kl_only_on_mastered_groups():
    old = t([[0.0], [0.0]]) - 1.0
    logp = old + 0.5
    inputs = regularizer_inputs(logp=logp, mask=torch.ones(2, 1), old_logp=old, group_mean_reward=t([1.0, 0.5]))
    k3 = math.exp(-0.5) + 0.5 - 1.0
    torch.testing.assert_close(REGULARIZERS.get("mastery_hinge_kl")(*inputs, margin=0.01), t([[k3 - 0.01], [0.0]]))


def test_low_probability_kl_to_the_filtered_proxy():
    logits = torch.log(t([[0.7, 0.29, 0.01]])).requires_grad_(True)  # one action [n=1, V=3]
    loss = low_probability_term(logits, noise_ratio=0.02)  # 0.01 < 0.02 · 0.7: filtered
    torch.testing.assert_close(loss.detach(), t([-math.log(0.99)]))  # q = π/Z on kept tokens: KL = −log Z
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    torch.testing.assert_close(grad, t([[0.7 - 0.7 / 0.99, 0.29 - 0.29 / 0.99, 0.01]]))  # π − q (q detached)
    assert low_probability_term(logits.detach(), noise_ratio=0.0).item() == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match=r"noise_ratio must be in \[0, 1\), got 1.5"):
        low_probability_term(logits, noise_ratio=1.5)
    with pytest.raises(ValueError, match=r"logits must have shape \[n, V\]"):
        low_probability_term(logits[None])


def test_distribution_entropy_kl_to_the_tempered_policy():
    logits = torch.log(t([[0.25, 0.75]]))
    q = [1 / (1 + math.sqrt(3)), math.sqrt(3) / (1 + math.sqrt(3))]  # softmax(z / 2)
    expected = q[0] * math.log(q[0] / 0.25) + q[1] * math.log(q[1] / 0.75)
    torch.testing.assert_close(distribution_entropy_term(logits, temperature=2.0), t([expected]))
    torch.testing.assert_close(distribution_entropy_term(logits, temperature=1.0), t([0.0]))
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        distribution_entropy_term(logits, temperature=0)


@pytest.mark.parametrize("name", ["low_probability", "distribution_entropy"])
def test_vocabulary_options_read_the_policy_value_and_zero_padding(name):
    assert REGULARIZERS.meta(name)["needs"] == ("vocab_term",)
    vocab = t([[0.3, 0.5], [0.2, 7.0]]).requires_grad_(True)
    inputs = regularizer_inputs(logp=t([[0.0, 0.0], [0.0, 0.0]]), mask=torch.tensor([[1, 1], [1, 0]]), vocab=vocab)
    loss = REGULARIZERS.get(name)(*inputs)
    torch.testing.assert_close(loss.detach(), t([[0.3, 0.5], [0.2, 0.0]]))
    (grad,) = torch.autograd.grad(loss.sum(), vocab)
    torch.testing.assert_close(grad, t([[1.0, 1.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match=r"needs the score feature 'vocab_term'"):
        REGULARIZERS.get(name)(*regularizer_inputs(logp=t([[0.0]]), mask=torch.ones(1, 1)))
    with pytest.raises(ValueError, match=r"vocab_term must have shape \[N, T\]=\[1, 1\]"):
        REGULARIZERS.get(name)(*regularizer_inputs(logp=t([[0.0]]), mask=torch.ones(1, 1), vocab=t([[0.0, 1.0]])))


def test_bind_vocab_term_binds_and_validates_hyperparameters():
    logits = torch.log(t([[0.25, 0.75]]))
    torch.testing.assert_close(
        bind_vocab_term("distribution_entropy", temperature=2.0)(logits),
        distribution_entropy_term(logits, temperature=2.0),
    )
    with pytest.raises(ValueError, match=r"noise_ratio must be in \[0, 1\)"):
        bind_vocab_term("low_probability", noise_ratio=-0.1)
    with pytest.raises(ValueError, match="'hazard_penalty' has no vocabulary term"):
        bind_vocab_term("hazard_penalty")


def test_hazard_penalty_weibull_hazards_on_each_side():
    old = t([[-1.0, -1.0, -1.0]])
    logp = (old + t([[0.1, -0.3, 0.5]])).requires_grad_(True)
    inputs = regularizer_inputs(logp=logp, mask=torch.tensor([[1, 1, 0]]), old_logp=old)
    penalty = REGULARIZERS.get("hazard_penalty")(*inputs, scale_pos=0.2, shape_pos=2.0, scale_neg=0.3, shape_neg=1.0)
    torch.testing.assert_close(penalty.detach(), t([[0.25, 1.0, 0.0]]))  # (0.1/0.2)², (0.3/0.3)¹, padding
    (grad,) = torch.autograd.grad(penalty.sum(), logp)
    torch.testing.assert_close(grad, t([[2 * 0.1 / 0.04, -1 / 0.3, 0.0]]))  # k·ℓ^{k−1}/λ^k, −1/λ₋
    default = REGULARIZERS.get("hazard_penalty")(*inputs)  # λ = 0.2, k = 2 on both sides
    torch.testing.assert_close(default.detach(), t([[0.25, 2.25, 0.0]]))
    unchanged = regularizer_inputs(logp=old, mask=torch.ones(1, 3), old_logp=old)
    torch.testing.assert_close(REGULARIZERS.get("hazard_penalty")(*unchanged), t([[0.0, 0.0, 0.0]]))


@pytest.mark.parametrize(
    "hp, message",
    [
        ({"scale_pos": 0.0}, "scale_pos and scale_neg must be > 0"),
        ({"scale_neg": -1.0}, "scale_pos and scale_neg must be > 0"),
        ({"shape_pos": 0.5}, "shape_pos and shape_neg must be >= 1"),
        ({"shape_neg": 0.0}, "shape_pos and shape_neg must be >= 1"),
    ],
)
def test_hazard_penalty_rejects_bad_hyperparameters(hp, message):
    inputs = regularizer_inputs(logp=t([[0.0]]), mask=torch.ones(1, 1), old_logp=t([[0.0]]))
    with pytest.raises(ValueError, match=message):
        REGULARIZERS.get("hazard_penalty")(*inputs, **hp)
    with pytest.raises(ValueError, match=r"needs the signal 'old_logp'"):
        REGULARIZERS.get("hazard_penalty")(*regularizer_inputs(logp=t([[0.0]]), mask=torch.ones(1, 1)))


def test_majority_boosted_weights_majority_correct_groups():
    rewards, groups = t([1, 1, 1, 0, 1, 0]), torch.tensor([0, 0, 0, 0, 1, 1])
    base = ADVANTAGE_ESTIMATORS.get("grpo")(rewards, groups)
    got = ADVANTAGE_ESTIMATORS.get("majority_boosted")(rewards, groups, boost=0.5)
    torch.testing.assert_close(got, base * t([1.5] * 4 + [1.0] * 2))
