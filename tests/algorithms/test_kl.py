"""KL estimators, entropy and the two KL placements: hand-computed values, k3 >= 0, numerical stability."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genalign.algorithms import (
    KL_ESTIMATORS,
    entropy_bonus,
    entropy_from_logits,
    kl_in_reward,
    kl_penalty,
    sequence_kl,
)
from genalign.registry import UnknownOptionError

F64 = torch.float64


def test_kl_estimators_hand_computed():
    logp = torch.tensor([[math.log(0.5), math.log(0.2)]], dtype=F64)
    ref = torch.tensor([[math.log(0.25), math.log(0.4)]], dtype=F64)
    delta = [math.log(0.5), math.log(2.0)]  # ref − logp
    expected = {
        "k1": [-d for d in delta],
        "k2": [d * d / 2 for d in delta],
        "k3": [math.exp(d) - d - 1 for d in delta],
    }
    assert set(KL_ESTIMATORS.names()) == set(expected)
    for name, values in expected.items():
        torch.testing.assert_close(kl_penalty(logp, ref, name), torch.tensor([values], dtype=F64), rtol=1e-12, atol=0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0)), min_size=1, max_size=8))
def test_k3_and_k2_are_non_negative(pairs):
    logp = torch.tensor([[a for a, _ in pairs]], dtype=F64)
    ref = torch.tensor([[b for _, b in pairs]], dtype=F64)
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert (kl_penalty(logp, ref, "k2") >= 0).all()


def test_kl_gradient_and_zero_at_reference():
    logp = torch.tensor([[-1.0, -2.0]], dtype=F64, requires_grad=True)
    k3 = kl_penalty(logp, logp.detach(), "k3")
    assert torch.equal(k3, torch.zeros_like(k3))
    (grad,) = torch.autograd.grad(kl_penalty(logp, torch.tensor([[-1.5, -2.0]], dtype=F64), "k3").sum(), logp)
    # d/dlogp [exp(ref − logp) − (ref − logp) − 1] = 1 − exp(ref − logp)
    torch.testing.assert_close(grad, torch.tensor([[1 - math.exp(-0.5), 0.0]], dtype=F64))


def test_kl_penalty_bad_input():
    with pytest.raises(UnknownOptionError, match="Valid names: k1, k2, k3"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "k4")
    with pytest.raises(ValueError, match=r"ref_logp must have shape \[N, T\]=\[1, 2\]"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(2), "k3")


def test_sequence_kl_and_kl_in_reward():
    kl = torch.tensor([[0.1, 0.2, float("nan")], [0.5, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    per_sample = sequence_kl(kl, mask)
    torch.testing.assert_close(per_sample, torch.tensor([0.3, 0.5], dtype=F64))
    rewards = torch.tensor([1.0, float("nan")], dtype=F64)
    shaped = kl_in_reward(rewards, per_sample, 0.1)
    assert shaped[0].item() == pytest.approx(0.97, rel=1e-12) and math.isnan(shaped[1].item())
    with pytest.raises(ValueError, match=r"kl_per_sample must have shape \[N\]=\[2\]"):
        kl_in_reward(rewards, per_sample[:1], 0.1)
    with pytest.raises(ValueError, match="coef must be >= 0"):
        kl_in_reward(rewards, per_sample, -1.0)


def test_entropy_hand_computed_and_stable():
    uniform = torch.zeros(2, 3, 4)
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2, 3), math.log(4)))
    logits = torch.log(torch.tensor([0.5, 0.25, 0.25], dtype=F64))
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert entropy_from_logits(logits).item() == pytest.approx(expected, rel=1e-12)
    huge = torch.tensor([1e4, 1e4 - math.log(3.0), -1e4], dtype=torch.bfloat16)
    out = entropy_from_logits(huge)
    assert out.dtype == torch.float32 and torch.isfinite(out)
    assert torch.isfinite(entropy_from_logits(torch.tensor([0.0, -math.inf, 1.0]))).all()


def test_entropy_bonus():
    entropy = torch.tensor([[1.0, 2.0]], dtype=F64)
    torch.testing.assert_close(entropy_bonus(entropy, 0.01), torch.tensor([[-0.01, -0.02]], dtype=F64))
