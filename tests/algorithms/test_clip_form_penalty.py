"""The SPO penalty clip form [123]: hand-computed gradients, and the gradient of SPO's closed-form objective."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CLIP_FORMS, policy_loss

F64 = torch.float64


def spo_step(ratios, advantages, **kwargs):
    """One action per sequence: ``(loss, d loss.sum() / d logp, metrics)`` of the ``spo`` clip form."""
    log_ratio = torch.log(torch.tensor(ratios, dtype=F64))[:, None]
    old = torch.zeros_like(log_ratio)
    logp = (old + log_ratio).requires_grad_(True)
    loss, metrics = policy_loss(logp, old, torch.tensor(advantages, dtype=F64), torch.ones_like(logp), clip="spo",
                                **kwargs)  # fmt: skip
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach().flatten(), grad.flatten(), metrics


def test_spo_gradient_is_pulled_back_beyond_the_trust_region():
    # ε = 0.2; d loss / dℓ = −w·ρ·A with w = 1 − sign(A)(ρ − 1)/ε
    loss, grad, metrics = spo_step([1.1, 1.5, 0.7, 1.0], [1.0, 1.0, -2.0, 3.0])
    torch.testing.assert_close(grad, torch.tensor([-0.55, 2.25, -0.7, -3.0], dtype=F64))
    # inside (w = 0.5): half the plain gradient; beyond 1 + ε (w = −1.5): pushed down, where PPO's would be 0;
    # A < 0 below 1 − ε (w = −0.5): pushed up; ρ = 1: the plain policy gradient
    torch.testing.assert_close(loss, torch.tensor([-1.1, -1.5, 1.4, -3.0], dtype=F64))  # the value is −ρA
    assert metrics["clip_frac_high"].item() == pytest.approx(0.25)  # the second action
    assert metrics["clip_frac_low"].item() == pytest.approx(0.25)  # the third


def test_spo_gradient_equals_the_gradient_of_its_closed_form_objective():
    generator = torch.Generator().manual_seed(0)
    log_ratio = 0.6 * torch.randn(5, 4, generator=generator, dtype=F64)
    advantages = torch.randn(5, generator=generator, dtype=F64)
    old = torch.randn(5, 4, generator=generator, dtype=F64)
    logp = (old + log_ratio).requires_grad_(True)
    loss, _ = policy_loss(logp, old, advantages, torch.ones_like(logp), clip="spo", eps=0.3)
    (ours,) = torch.autograd.grad(loss.sum(), logp)
    ratio = torch.exp(logp - old)
    a = advantages[:, None]
    objective = ratio * a - a.abs() / (2 * 0.3) * (ratio - 1.0) ** 2  # SPO's per-action objective
    (expected,) = torch.autograd.grad(-objective.sum(), logp)
    torch.testing.assert_close(ours, expected)


def test_spo_composes_with_the_sequence_ratio_level():
    old = torch.zeros(1, 2, dtype=F64)
    logp = torch.log(torch.tensor([[1.2, 1.2]], dtype=F64)).requires_grad_(True)  # sequence ratio 1.2
    loss, _ = policy_loss(logp, old, torch.tensor([1.0], dtype=F64), torch.ones_like(logp), clip="spo",
                          ratio_level="sequence")  # fmt: skip
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    # s = exp(mean ℓ): ds/dℓ_t = s/2; w = 1 − 0.2/0.2 = 0 at the trust region's edge: no gradient at all
    torch.testing.assert_close(grad, torch.zeros(1, 2, dtype=F64))


def test_spo_rejects_a_non_positive_eps():
    with pytest.raises(ValueError, match=r"eps must be > 0 .* got 0"):
        CLIP_FORMS.get("spo")(torch.zeros(1, 1), torch.ones(1, 1), eps=0)
