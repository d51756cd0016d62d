"""Aggregation: hand-computed values, micro-batch invariance with the global normaliser, bad input."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import (
    AGGREGATIONS,
    HyperparameterError,
    aggregate,
    check_hyperparameters,
    kl_penalty,
    loss_normalizer,
    policy_loss,
)
from genalign.registry import UnknownOptionError

F64 = torch.float64

# rows: [1, 2, 3] (A > 0), [4, 5] (A > 0), [6] (A < 0), [2, 2] (A = 0), and an empty row (mask all 0)
LOSS = torch.tensor([[1, 2, 3], [4, 5, 9], [6, 9, 9], [2, 2, 9], [7, 7, 7]], dtype=F64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]])
ADV = torch.tensor([1.0, 0.5, -2.0, 0.0, 1.0], dtype=F64)

EXPECTED = {
    "token_mean": (25 / 8, [8.0]),
    "seq_mean_token_mean": ((2 + 4.5 + 6 + 2) / 4, [4.0]),
    "seq_mean_token_sum": (25 / 4, [4.0]),
    "seq_mean_token_sum_norm": (25 / (4 * 6), [4.0]),  # max_len = 6
    # positive token mean 15/5 = 3 over 2 sequences, negative 6/1 over 1 sequence; the A = 0 row is left out
    "balanced": ((2 * 3 + 1 * 6) / 3, [5.0, 1.0, 2.0, 1.0]),
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_hand_computed(mode):
    value, stats = EXPECTED[mode]
    normalizer = loss_normalizer(MASK, mode, advantages=ADV, max_len=6)
    assert normalizer.dtype == F64
    assert normalizer.tolist() == stats
    result = aggregate(LOSS, MASK, mode, normalizer, advantages=ADV, max_len=6)
    assert result.item() == pytest.approx(value, rel=1e-12)


def test_every_mode_has_a_hand_computed_case():
    assert set(AGGREGATIONS.names()) == set(EXPECTED)


def test_padding_values_never_leak():
    poisoned = LOSS.clone()
    poisoned[MASK == 0] = float("nan")
    for mode in AGGREGATIONS.names():
        normalizer = loss_normalizer(MASK, mode, advantages=ADV, max_len=6)
        result = aggregate(poisoned, MASK, mode, normalizer, advantages=ADV, max_len=6)
        assert result.item() == pytest.approx(EXPECTED[mode][0], rel=1e-12), mode


# ------------------------------------------------------------------------------------------- micro-batch invariance
def _problem(seed: int = 0):
    """A small off-policy batch whose loss depends on one shared parameter vector."""
    gen = torch.Generator().manual_seed(seed)
    n, t = 8, 6
    lengths = torch.tensor([6, 1, 3, 5, 2, 6, 4, 3])
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(F64)  # [N, T]
    base = -torch.rand(n, t, generator=gen, dtype=F64) * 2
    old = base + 0.3 * torch.randn(n, t, generator=gen, dtype=F64)
    ref = base + 0.1 * torch.randn(n, t, generator=gen, dtype=F64)
    advantages = torch.randn(n, generator=gen, dtype=F64)
    theta = (0.1 * torch.randn(t, generator=gen, dtype=F64)).requires_grad_(True)  # shared parameter
    return base, old, ref, advantages, mask, theta


def _loss_of(rows, base, old, ref, advantages, mask, theta, mode, normalizer):
    logp = base[rows] + theta  # [n, T]
    per_action, _ = policy_loss(logp, old[rows], advantages[rows], mask[rows], clip="ppo", eps_high=0.28)
    per_action = per_action + 0.05 * kl_penalty(logp, ref[rows], "k3")
    return aggregate(per_action, mask[rows], mode, normalizer, advantages=advantages[rows], max_len=6)


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_micro_batches_with_global_normalizer_match_the_full_batch(mode):
    base, old, ref, advantages, mask, theta = _problem()
    everything = torch.arange(8)
    full_norm = loss_normalizer(mask, mode, advantages=advantages, max_len=6)
    (full_grad,) = torch.autograd.grad(
        _loss_of(everything, base, old, ref, advantages, mask, theta, mode, full_norm), theta
    )

    micro_batches = [torch.tensor(rows) for rows in ([0, 5], [1, 2], [3, 7], [4, 6])]
    stats = [loss_normalizer(mask[r], mode, advantages=advantages[r], max_len=6) for r in micro_batches]
    global_norm = torch.stack(stats).sum(0)  # what the trainer sums and all-reduces
    torch.testing.assert_close(global_norm, full_norm, rtol=0, atol=0)
    summed = torch.zeros_like(theta)
    for rows in micro_batches:
        loss = _loss_of(rows, base, old, ref, advantages, mask, theta, mode, global_norm)
        summed += torch.autograd.grad(loss, theta)[0]
    torch.testing.assert_close(summed, full_grad, rtol=0, atol=1e-10)

    # the same split with per-micro-batch normalisers is wrong: the test has teeth
    local = torch.zeros_like(theta)
    for rows, stat in zip(micro_batches, stats):
        local += torch.autograd.grad(_loss_of(rows, base, old, ref, advantages, mask, theta, mode, stat), theta)[0]
    assert not torch.allclose(local, full_grad, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------------- bad input
def test_unknown_mode_lists_valid_names():
    with pytest.raises(UnknownOptionError, match=r"Did you mean 'token_mean'.*Valid names: balanced"):
        loss_normalizer(MASK, "token-mean")


def test_missing_arguments_raise():
    with pytest.raises(ValueError, match="pass max_len >= 1"):
        loss_normalizer(MASK, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match=r"balanced.*pass advantages \[N\]"):
        loss_normalizer(MASK, "balanced")
    with pytest.raises(ValueError, match=r"shape \[N\]=\[5\] or \[N, T\]=\[5, 3\], got \[5, 2\]"):
        loss_normalizer(MASK, "balanced", advantages=ADV[:, None].expand(5, 2))


def test_balanced_accepts_per_action_advantages_by_sequence_sign():
    weights = torch.tensor([[0.5, 2, 1], [0, 1, 1], [3, 1, 1], [1, 1, 1], [1, 1, 1]], dtype=F64)
    per_action = ADV[:, None] * weights  # non-negative credit weights keep each sequence's sign
    normalizer = loss_normalizer(MASK, "balanced", advantages=per_action)
    assert normalizer.tolist() == EXPECTED["balanced"][1]
    result = aggregate(LOSS, MASK, "balanced", normalizer, advantages=per_action)
    assert result.item() == pytest.approx(EXPECTED["balanced"][0], rel=1e-12)


def test_wrong_normalizer_or_mask_shape_raises():
    with pytest.raises(ValueError, match=r"normalizer for 'balanced' must have shape \[4\]"):
        aggregate(LOSS, MASK, "balanced", torch.ones(1, dtype=F64), advantages=ADV)
    with pytest.raises(ValueError, match=r"mask must have shape \[N, T\]=\[5, 3\]"):
        aggregate(LOSS, MASK[:, :2], "token_mean", torch.ones(1, dtype=F64))


def test_aggregation_hyperparameters_for_config_validation():
    check_hyperparameters(AGGREGATIONS, "seq_mean_token_sum_norm", {"max_len": 1024})
    check_hyperparameters(AGGREGATIONS, "token_mean", {})
    with pytest.raises(HyperparameterError, match=r"'token_mean'.*'max_len'.*Accepted keywords: none"):
        check_hyperparameters(AGGREGATIONS, "token_mean", {"max_len": 1024})
