"""MDPO's proximity term to the previous policy [122] (``mirror_descent_kl``): value, gradient, step-size schedule and
the unbiasedness of its KL estimate."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REGULARIZERS
from genalign.experimental.regularizers.previous_policy import kl_to_old_from_old_samples
from tests.algorithms.regularizer_inputs import regularizer_inputs

F64 = torch.float64


def penalty(ratios, *, mask=None, progress=None, **hp):
    old = torch.full((1, len(ratios)), math.log(0.5), dtype=F64)
    logp = (old + torch.log(torch.tensor([ratios], dtype=F64))).requires_grad_(True)
    mask = torch.ones_like(logp) if mask is None else torch.tensor([mask], dtype=F64)
    score, advantages, batch = regularizer_inputs(logp=logp, mask=mask, old_logp=old)
    if progress is not None:
        batch = batch.with_values(progress=progress)
    value = REGULARIZERS.get("mirror_descent_kl")(score, advantages, batch, **hp)
    (grad,) = torch.autograd.grad(value.sum(), logp)
    return value.detach(), grad


def test_value_and_gradient_vanish_at_the_previous_policy_and_grow_away_from_it():
    value, grad = penalty([1.5, 1.0, 0.5, 4.0], mask=[1, 1, 1, 0])
    expected = [1.5 * math.log(1.5) - 0.5, 0.0, 0.5 * math.log(0.5) + 0.5, 0.0]  # ρ log ρ − ρ + 1; padding 0
    torch.testing.assert_close(value, torch.tensor([expected], dtype=F64))
    torch.testing.assert_close(grad, torch.tensor([[1.5 * math.log(1.5), 0.0, 0.5 * math.log(0.5), 0.0]], dtype=F64))
    assert (value >= 0).all()


def test_step_size_scales_the_term_and_can_follow_progress():
    base, _ = penalty([1.5])
    halved, _ = penalty([1.5], step_size=2.0)
    torch.testing.assert_close(halved, base / 2)
    scheduled, _ = penalty([1.5], step_size=1.0, step_size_end=3.0, progress=0.5)  # t = 2
    torch.testing.assert_close(scheduled, base / 2)
    with pytest.raises(ValueError, match="needs the signal 'progress'"):
        penalty([1.5], step_size_end=3.0)
    with pytest.raises(ValueError, match=r"step_size and step_size_end must be > 0"):
        penalty([1.5], step_size=0.0)


def test_the_estimate_is_unbiased_for_kl_to_the_old_policy():
    old = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    new = torch.tensor([0.2, 0.3, 0.5], dtype=F64)
    estimate = (old * kl_to_old_from_old_samples(torch.log(new / old))).sum()  # E over actions drawn from π_old
    torch.testing.assert_close(estimate, (new * torch.log(new / old)).sum())  # KL(πθ ‖ π_old)
