"""Per-action credit weights: hand-computed entropy weighting and forking-token selection."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import CREDIT_WEIGHTS, HyperparameterError, check_hyperparameters

F64 = torch.float64
ADV = torch.tensor([1.0, -1.0], dtype=F64)
MASK = torch.ones(2, 2)
ENTROPY = torch.tensor([[1.0, 3.0], [1.0, 4.0]], dtype=F64)


def test_none_is_all_ones():
    assert torch.equal(CREDIT_WEIGHTS.get("none")(ADV, MASK, ENTROPY), torch.ones(2, 2, dtype=F64))


def test_entropy_weighted_token_level():
    w = CREDIT_WEIGHTS.get("entropy_weighted")(ADV, MASK, ENTROPY, alpha=1.0)
    # positive: H / mean(1, 3) = [0.5, 1.5]; negative: (1/H) / mean(1, 1/4) = [1.6, 0.4]
    torch.testing.assert_close(w, torch.tensor([[0.5, 1.5], [1.6, 0.4]], dtype=F64))
    half = CREDIT_WEIGHTS.get("entropy_weighted")(ADV, MASK, ENTROPY, alpha=0.5)
    torch.testing.assert_close(half, 0.5 + 0.5 * w)


def test_entropy_weighted_sequence_level_and_zero_advantage():
    adv = torch.tensor([1.0, 1.0, 0.0], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    entropy = torch.tensor([[1.0, 3.0], [4.0, 99.0], [5.0, 5.0]], dtype=F64)
    w = CREDIT_WEIGHTS.get("entropy_weighted")(adv, mask, entropy, alpha=1.0, level="sequence")
    # sequence entropies 2 and 4 (padding ignored), mean 3 -> 2/3 and 4/3 on every action; A = 0 -> 1
    torch.testing.assert_close(w[:, 0], torch.tensor([2 / 3, 4 / 3, 1.0], dtype=F64))
    torch.testing.assert_close(w[0], torch.tensor([2 / 3, 2 / 3], dtype=F64))


def test_high_entropy_tokens_top_fraction_with_ties():
    w = CREDIT_WEIGHTS.get("high_entropy_tokens")(ADV, MASK, ENTROPY, rho=0.5)
    assert w.tolist() == [[0.0, 1.0], [0.0, 1.0]]
    ties = torch.tensor([[2.0, 2.0], [1.0, 9.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0]])  # the 9.0 is padding and never selected
    w = CREDIT_WEIGHTS.get("high_entropy_tokens")(ADV, mask, ties, rho=0.25)
    assert w.tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_bad_input():
    with pytest.raises(ValueError, match="alpha must be in"):
        CREDIT_WEIGHTS.get("entropy_weighted")(ADV, MASK, ENTROPY, alpha=2.0)
    with pytest.raises(ValueError, match="rho must be in"):
        CREDIT_WEIGHTS.get("high_entropy_tokens")(ADV, MASK, ENTROPY, rho=0.0)
    with pytest.raises(ValueError, match=r"advantages must have shape \[N\]=\[2\]"):
        CREDIT_WEIGHTS.get("none")(ADV[:1], MASK, ENTROPY)
    with pytest.raises(ValueError, match=r"mask must have shape \[N, T\]=\[2, 2\]"):
        CREDIT_WEIGHTS.get("none")(ADV, MASK[:, :1], ENTROPY)
    with pytest.raises(HyperparameterError, match=r"'high_entropy_tokens'.*Accepted keywords: rho"):
        check_hyperparameters(CREDIT_WEIGHTS, "high_entropy_tokens", {"top_p": 0.2})


def test_polarity_token_weights_by_behaviour_probability_and_sign():
    adv = torch.tensor([1.0, -1.0, 0.0], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    probs = torch.tensor([[0.2, 0.9], [0.2, 0.9], [0.5, 0.5]], dtype=F64)
    entropy = torch.zeros(3, 2, dtype=F64)
    w = CREDIT_WEIGHTS.get("polarity_token_weights")(adv, mask, entropy, logp=probs.log(), alpha_pos=0.5, alpha_neg=1.0)
    # A > 0: 1 + 0.5·(1 − p) = [1.4, 1.05]; A < 0: 1 + 1.0·p = [1.2, 1.9]; A = 0 and padding: 1
    torch.testing.assert_close(w, torch.tensor([[1.4, 1.05], [1.2, 1.9], [1.0, 1.0]], dtype=F64))
    annealed = CREDIT_WEIGHTS.get("polarity_token_weights")(
        adv, mask, entropy, logp=probs.log(), progress=0.75, alpha_pos=0.5, alpha_neg=1.0, anneal=True
    )  # α·(1 − 0.75)
    torch.testing.assert_close(annealed, torch.tensor([[1.1, 1.0125], [1.05, 1.225], [1.0, 1.0]], dtype=F64))
    ended = CREDIT_WEIGHTS.get("polarity_token_weights")(adv, mask, entropy, probs.log(), 1.0, anneal=True)
    assert torch.equal(ended, torch.ones(3, 2, dtype=F64))


def test_polarity_token_weights_needs_logp_progress_and_valid_alphas():
    with pytest.raises(ValueError, match=r"needs logp \[N, T\].*logp=rollout.old_logp"):
        CREDIT_WEIGHTS.get("polarity_token_weights")(ADV, MASK, ENTROPY)
    with pytest.raises(ValueError, match=r"anneal=True needs progress in \[0, 1\], got None"):
        CREDIT_WEIGHTS.get("polarity_token_weights")(ADV, MASK, ENTROPY, logp=-ENTROPY, anneal=True)
    with pytest.raises(ValueError, match="alpha_pos and alpha_neg must be >= 0"):
        CREDIT_WEIGHTS.get("polarity_token_weights")(ADV, MASK, ENTROPY, logp=-ENTROPY, alpha_neg=-1.0)
    with pytest.raises(ValueError, match=r"logp must have shape \[N, T\]=\[2, 2\]"):
        CREDIT_WEIGHTS.get("polarity_token_weights")(ADV, MASK, ENTROPY, logp=-ENTROPY[:, :1])


def test_every_credit_weight_takes_logp_and_progress():
    for name in CREDIT_WEIGHTS.names():
        if name == "polarity_token_weights":
            continue
        plain = CREDIT_WEIGHTS.get(name)(ADV, MASK, ENTROPY)
        assert torch.equal(CREDIT_WEIGHTS.get(name)(ADV, MASK, ENTROPY, logp=-ENTROPY, progress=0.5), plain), name
