"""Ratio levels of the method catalogue: hand-computed losses and gradients (one row unless stated, float64)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import StepBatch, policy_loss

F64 = torch.float64


def run(log_ratios, advantages, *, mask=None, old=None, batch=None, **kwargs):
    """Rows of log-ratios ``[N, T]`` around ``old`` (default 0): returns (loss [N, T], d loss.sum() / d logp [N, T])."""
    log_ratio = torch.tensor(log_ratios, dtype=F64)
    old = torch.zeros_like(log_ratio) if old is None else torch.tensor(old, dtype=F64)
    logp = (old + log_ratio).requires_grad_(True)
    mask = torch.ones_like(log_ratio) if mask is None else torch.tensor(mask, dtype=F64)
    loss, _ = policy_loss(logp, old, torch.tensor(advantages, dtype=F64), mask, batch=batch, **kwargs)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach(), grad


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=1e-10, atol=1e-12)


def test_sentence_ratio_with_fixed_windows():
    loss, grad = run([[0.1, 0.3, -0.2, 0.0]], [1.0], ratio_level="sentence", clip="none", segment_length=2)
    # sentences {0, 1}: mean 0.2; {2, 3}: mean -0.1
    e1, e2 = math.exp(0.2), math.exp(-0.1)
    close(loss, [[-e1, -e1, -e2, -e2]])
    close(grad, [[-e1, -e1, -e2, -e2]])  # d/dℓ0 of −2·exp((ℓ0+ℓ1)/2) = −exp(0.2)


def test_sentence_ratio_with_given_segment_ids_and_sentence_entropy_for_the_clip():
    ids = torch.tensor([[0, 0, 0, 7]])
    loss, _ = run([[0.1, 0.3, -0.2, 0.0]], [1.0], ratio_level="sentence", clip="none", batch=StepBatch(segment_ids=ids))
    m = (0.1 + 0.3 - 0.2) / 3
    close(loss, [[-math.exp(m)] * 3 + [-1.0]])
    # entropy_adaptive sees the sentence mean entropy: sentence 0 has H = 1 (row mean 1.25 -> scale 0.8, ε_high 0.16)
    entropy = torch.tensor([[0.5, 1.5, 1.0, 2.0]], dtype=F64)
    context = StepBatch(segment_ids=ids, entropy=entropy)
    loss, _ = run([[0.2, 0.2, 0.2, 0.2]], [1.0], ratio_level="sentence", clip="entropy_adaptive", batch=context)
    close(loss, [[-1.16, -1.16, -1.16, -math.exp(0.2)]])  # sentence 1: H = 2 -> scale 1.6, ε_high 0.32 (unclipped)


def test_prefix_geometric_mean():
    loss, grad = run([[0.2, -0.4, 0.5]], [1.0], ratio_level="prefix_geometric", clip="none")
    m = [0.2, -0.1, 0.1]
    close(loss, [[-math.exp(v) for v in m]])
    e = [math.exp(v) for v in m]
    close(grad, [[-(e[0] + e[1] / 2 + e[2] / 3), -(e[1] / 2 + e[2] / 3), -e[2] / 3]])


def test_prefix_geometric_ignores_padding():
    loss, grad = run([[0.2, -0.4, 9.0]], [1.0], mask=[[1, 1, 0]], ratio_level="prefix_geometric", clip="none")
    close(loss, [[-math.exp(0.2), -math.exp(-0.1), 0.0]])
    close(grad[:, 2], [0.0])


def test_cumulative_ratio_with_sqrt_position_clipping():
    high = math.log(1.2)
    loss, grad = run([[0.2, 0.3, 0.4]], [1.0], ratio_level="cumulative", clip="ppo")
    # L = [0.2, 0.5, 0.9]; L/√t = [0.2, 0.354, 0.520] > log 1.2 -> all capped at √t·log 1.2, no gradient
    close(loss, [[-math.exp(high * math.sqrt(t)) for t in (1, 2, 3)]])
    close(grad, [[0.0, 0.0, 0.0]])
    loss, grad = run([[0.2, 0.3, 0.4]], [-1.0], ratio_level="cumulative", clip="ppo")
    e = [math.exp(v) for v in (0.2, 0.5, 0.9)]
    close(loss, [e])
    close(grad, [[e[0] + e[1] + e[2], e[1] + e[2], e[2]]])


def test_cumulative_ratio_position_scaling_choices():
    high = math.log(1.2)
    assert 0.1 < high < 0.2
    # none: L_t clipped at log 1.2 itself; L = [0.1, 0.2] -> only t = 2 is capped
    loss, _ = run([[0.1, 0.1]], [1.0], ratio_level="cumulative", clip="ppo", position_scaling="none")
    close(loss, [[-math.exp(0.1), -1.2]])
    # linear: L_t / t = prefix mean [0.1, 0.1] < log 1.2: nothing capped
    loss, _ = run([[0.1, 0.1]], [1.0], ratio_level="cumulative", clip="ppo", position_scaling="linear")
    close(loss, [[-math.exp(0.1), -math.exp(0.2)]])
    with pytest.raises(ValueError, match="position_scaling"):
        run([[0.1]], [1.0], ratio_level="cumulative", position_scaling="log")


def test_min_prefix_ratio():
    loss, grad = run([[0.1, -0.3, 0.2, -0.1]], [1.0], ratio_level="min_prefix", clip="none")
    close(loss, [[-math.exp(0.1)] + [-math.exp(-0.3)] * 3])
    close(grad, [[-math.exp(0.1), -3 * math.exp(-0.3), 0.0, 0.0]])


@pytest.mark.parametrize(("p", "expected"), [(1.0, 1.5), (2.0, math.sqrt(2.5)), (0.0, math.sqrt(2.0)), (-1.0, 4 / 3)])
def test_holder_power_mean(p, expected):
    loss, grad = run([[0.0, math.log(2.0)]], [1.0], ratio_level="holder", clip="none", holder_p=p)
    close(loss, [[-expected, -expected]])
    # d/dℓ_t (−2·M_p) = −2 · ρ_t^p / (T · M_p^{p−1}) with T = 2
    close(grad, [[-(r**p) / expected ** (p - 1) for r in (1.0, 2.0)]])


def test_holder_p_is_annealed_with_progress():
    loss, _ = run(
        [[0.0, math.log(2.0)]], [1.0], ratio_level="holder", clip="none", holder_p=1.0, holder_p_end=3.0,
        batch=StepBatch(progress=0.5),
    )  # fmt: skip
    close(loss, [[-math.sqrt(2.5)] * 2])  # p = 2
    with pytest.raises(ValueError, match=r"needs the signal 'progress'"):
        run([[0.0, 0.1]], [1.0], ratio_level="holder", holder_p_end=3.0)


def test_hybrid_average_and_entropy_mixing():
    loss, grad = run([[0.2, -0.2]], [1.0], ratio_level="hybrid", clip="none")
    # sequence ratio exp(0) = 1; 0.5·ρ_t + 0.5·1
    close(loss, [[-(0.5 * math.exp(0.2) + 0.5), -(0.5 * math.exp(-0.2) + 0.5)]])
    # d/dℓ0: 0.5·e^{0.2} (token) + 2 actions · 0.5 · (1/2)·s (sequence) = 0.5e^{0.2} + 0.5
    close(grad, [[-(0.5 * math.exp(0.2) + 0.5), -(0.5 * math.exp(-0.2) + 0.5)]])
    context = StepBatch(entropy=torch.tensor([[1.0, 3.0]], dtype=F64))
    loss, _ = run([[0.2, -0.2]], [1.0], ratio_level="hybrid", clip="none", mixing="entropy", batch=context)
    alpha = [1 / 3, 3 / 5]  # H / (H + mean H), mean H = 2
    close(loss, [[-(a * math.exp(r) + 1 - a) for a, r in zip(alpha, (0.2, -0.2))]])


def test_bernoulli_variance_ratio():
    old = [[math.log(0.5), math.log(0.9)]]
    log_ratio = [[math.log(0.6 / 0.5), math.log(0.95 / 0.9)]]
    loss, grad = run(log_ratio, [1.0], old=old, ratio_level="bernoulli_variance", clip="none")
    v = [0.6 * 0.4 / (0.5 * 0.5), 0.95 * 0.05 / (0.9 * 0.1)]
    close(loss, [[-v[0], -v[1]]])
    close(grad, [[-v[0], -v[1]]])  # value v, gradient v·∇logπ


def test_bernoulli_variance_occurrence_normalisation():
    old = [[math.log(0.5), math.log(0.9)]]
    loss, _ = run([[0.0, 0.0]], [1.0], old=old, ratio_level="bernoulli_variance", clip="none", occurrence_group_size=4)
    close(loss, [[-1 / 1.8, -1 / 1.8]])  # G·π(o) = 4 · 0.45
    loss, _ = run([[0.0, 0.0]], [1.0], old=old, ratio_level="bernoulli_variance", clip="none", occurrence_group_size=2)
    close(loss, [[-1.0, -1.0]])  # 2 · 0.45 < 1: no change
