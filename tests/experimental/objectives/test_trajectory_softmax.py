"""HAEPO's Plackett-Luce objective [46] (``plackett_luce``): weights from a softmax over the group's trajectory
log-likelihoods, loss and gradient against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch, aggregate, loss_normalizer

F64 = torch.float64


def close(actual, expected):
    """The objective computes in float32 (its log-probs are cast)."""
    torch.testing.assert_close(actual.to(F64), torch.as_tensor(expected, dtype=F64), rtol=1e-6, atol=1e-7)


def run(logp, advantages, group_ids, **hp):
    logp = torch.tensor(logp, dtype=F64, requires_grad=True)
    mask = torch.ones_like(logp)
    batch = StepBatch(mask=mask, group_ids=torch.tensor(group_ids))
    loss, metrics = OBJECTIVES.get("plackett_luce")(ScoreOutput(logp), torch.tensor(advantages, dtype=F64), batch,
                                                    **hp)  # fmt: skip
    total = aggregate(loss, mask, "seq_mean_token_mean", loss_normalizer(mask, "seq_mean_token_mean"))
    (grad,) = torch.autograd.grad(total, logp)
    return loss.detach(), total.detach(), grad, metrics


def test_the_softmax_over_trajectory_likelihoods_weights_the_returns():
    # one group of three: L = (−1, −2, −2), Â = (1, −0.5, −0.5)
    loss, total, grad, metrics = run([[-0.5, -0.5], [-1.0, -1.0], [-2.0, 0.0]], [1.0, -0.5, -0.5], [7, 7, 7])
    p = 1 / (1 + 2 * math.exp(-1))  # softmax weight of the likeliest trajectory
    w = [p, (1 - p) / 2, (1 - p) / 2]
    adv = [1.0, -0.5, -0.5]
    weighted = sum(wi * ai for wi, ai in zip(w, adv))  # J = 1.5p − 0.5
    expected = torch.tensor([[-3 * wi * ai] * 2 for wi, ai in zip(w, adv)], dtype=F64)  # −G·w_i·Â_i per action
    close(loss, expected)
    close(total, torch.tensor(-weighted, dtype=F64))  # the mean over samples is −J
    # d(−J)/dL_i = −w_i (Â_i − J), the same for every action of trajectory i (L is their sum)
    expected_grad = torch.tensor([[-wi * (ai - weighted)] * 2 for wi, ai in zip(w, adv)], dtype=F64)
    close(grad, expected_grad)
    assert metrics["plackett_luce/max_weight"].item() == pytest.approx(p)
    assert metrics["plackett_luce/weighted_return"].item() == pytest.approx(weighted)


def test_groups_are_normalised_separately_and_equal_likelihoods_give_grpo_sized_gradients():
    # group 0: equal likelihoods -> w = 1/2, J = 0: the gradient on L_i is −G·w_i·(Â_i − J)/N = −(Â_i − mean Â)/N,
    # GRPO's size; group 1: L = (0, −ln 3) -> w = (3/4, 1/4)
    _, total, grad, _ = run([[-1.0], [-1.0], [0.0], [-math.log(3.0)]], [1.0, -1.0, 1.0, -1.0], [0, 0, 1, 1])
    j1 = 0.75 - 0.25
    # mean over the 4 samples of −G·w·Â: group 0 gives 0, group 1 gives −2·J_1 over 4 samples
    close(total, torch.tensor(-2 * j1 / 4, dtype=F64))
    expected = torch.tensor([[-0.5 * 1.0 * 2 / 4], [-0.5 * -1.0 * 2 / 4], [-0.75 * (1 - j1) * 2 / 4],
                             [-0.25 * (-1 - j1) * 2 / 4]], dtype=F64)  # fmt: skip
    close(grad, expected)


def test_temperature_and_length_normalisation_change_the_scores():
    logp = [[-1.0, -1.0], [-3.0, 0.0]]  # sums −2, −3; means −1, −1.5
    _, hot, _, _ = run(logp, [1.0, -1.0], [0, 0], temperature=2.0)
    w = 1 / (1 + math.exp(-0.5))  # softmax((−2, −3)/2)
    close(hot, torch.tensor(-(w - (1 - w)), dtype=F64))
    _, short, _, _ = run(logp, [1.0, -1.0], [0, 0], normalize_by_length=True)
    close(short, torch.tensor(-(2 * w - 1), dtype=F64))  # softmax(−1, −1.5) = same weights
    with pytest.raises(ValueError, match=r"temperature=0 must be > 0"):
        run(logp, [1.0, -1.0], [0, 0], temperature=0)
