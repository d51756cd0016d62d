"""Clip forms of the method catalogue: hand-computed losses and gradients (token level, float64)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import StepBatch, policy_loss

F64 = torch.float64


def run(ratios, advantages, *, rows: bool = False, old=None, batch=None, **kwargs):
    """``ratios``: one action per sequence (``rows=False``) or one row ``[1, T]`` with one advantage (``rows=True``).
    Returns (loss, d loss.sum() / d logp) flattened."""
    log_ratio = torch.log(torch.tensor(ratios, dtype=F64))
    log_ratio = log_ratio[None, :] if rows else log_ratio[:, None]
    old = torch.zeros_like(log_ratio) if old is None else torch.tensor(old, dtype=F64).view_as(log_ratio)
    logp = (old + log_ratio).requires_grad_(True)
    loss, _ = policy_loss(logp, old, torch.tensor(advantages, dtype=F64), torch.ones_like(logp), batch=batch, **kwargs)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach().flatten(), grad.flatten()


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=1e-10, atol=1e-12)


def test_entropy_adaptive_bounds():
    context = StepBatch(entropy=torch.tensor([[1.0, 3.0]], dtype=F64))  # row mean 2 -> scales 0.5, 1.5
    loss, grad = run([1.2, 1.2], [1.0], rows=True, batch=context, clip="entropy_adaptive")
    close(loss, [-1.1, -1.2])  # ε_high 0.1 (capped) and 0.3 (free)
    close(grad, [0.0, -1.2])
    with pytest.raises(ValueError, match=r"clip form 'entropy_adaptive' needs the signal 'entropy'"):
        run([1.2], [1.0], clip="entropy_adaptive")


def test_prob_adaptive_bounds_widen_for_unlikely_actions():
    old = [0.0, math.log(0.25)]  # q = 1 and 0.25 -> q^{-1/2} = 1, 2 -> ε_high = 0.2, 0.4
    loss, grad = run([1.3, 1.3], [1.0, 1.0], old=old, clip="prob_adaptive")
    close(loss, [-1.2, -1.3])
    close(grad, [0.0, -1.3])
    loss, _ = run([1.3], [1.0], old=[math.log(1e-4)], clip="prob_adaptive", eps_high_max=0.25)
    close(loss, [-1.25])  # 0.2 · 100 capped at 0.25


def test_elastic_bounds_follow_advantage_and_group_variance():
    loss, grad = run([1.35, 1.35], [1.0, 2.0], clip="elastic", advantage_gain=0.5)
    close(loss, [-1.3, -2 * 1.35])  # ε = 0.2·1.5 = 0.3 (capped), 0.2·2 = 0.4 (free)
    close(grad, [0.0, -2 * 1.35])
    context = StepBatch(group_reward_std=torch.tensor([0.5], dtype=F64))  # 4σ² = 1
    loss, _ = run([1.5], [1.0], clip="elastic", advantage_gain=0.0, variance_gain=1.0, batch=context)
    close(loss, [-1.4])  # ε = 0.2 · 2
    with pytest.raises(ValueError, match="group_reward_std"):
        run([1.5], [1.0], clip="elastic", variance_gain=1.0)


def test_asymmetric_is_flips_positive_ratios_with_a_soft_cap():
    loss, grad = run([0.5, 1.5, 0.2, 4.0, 0.5], [1, 1, 1, -1, -1], clip="asymmetric_is")
    # A>0: weight 1/ρ = 2 (with gradient); ρ = 1.5 > 1.28: no gradient (value 1/1.5); 1/0.2 = 5 soft-capped at 3
    # A<0: ρ = 4 soft-capped at 3 with gradient; ρ = 0.5 < 0.8: no gradient
    close(loss, [-2.0, -1 / 1.5, -3.0, 3.0, 0.5])
    close(grad, [-2.0, 0.0, -3.0, 3.0, 0.0])


def test_unbounded_positive_is_anchored_and_unclipped():
    loss, grad = run([5.0, 0.5, 2.0], [2.0, -1.0, -1.0], clip="unbounded_positive")
    close(loss, [-2.0, 0.8, 2.0])  # A>0: value 1 (πθ/sg πθ); A<0: PPO floor 0.8; ρ = 2 free
    close(grad, [-2.0, 0.0, 2.0])


def test_log_fidelity_is_bounded_and_smooth():
    loss, grad = run([math.exp(0.5), math.exp(-0.1)], [1.0, 1.0], clip="log_fidelity", scale_pos=0.25, scale_neg=0.5)
    w = [0.25 * math.tanh(2.0), 0.5 * math.tanh(-0.2)]
    close(loss, [-math.exp(w[0]), -math.exp(w[1])])
    close(grad, [-math.exp(w[0]) * (1 - math.tanh(2.0) ** 2), -math.exp(w[1]) * (1 - math.tanh(-0.2) ** 2)])


def test_unconditional_clip_and_self_normalisation():
    loss, grad = run([1.5, 1.5, 1.0], [1.0, -1.0, 1.0], clip="unconditional", self_normalize=False)
    close(loss, [-1.2, 1.2, -1.0])  # clipped whatever the sign of A
    close(grad, [0.0, 0.0, -1.0])
    loss, grad = run([1.5, 1.5, 1.0], [1.0, -1.0, 1.0], clip="unconditional")
    mean = (1.2 + 1.2 + 1.0) / 3
    close(loss, [-1.2 / mean, 1.2 / mean, -1.0 / mean])
    close(grad, [0.0, 0.0, -1.0 / mean])


def test_prefix_divergence_masks_by_position_and_budget():
    ratios = [math.exp(0.15), math.exp(0.05), math.exp(0.3)]
    # thresholds log 1.1, log 1.2, log 1.3 (linear in position): actions 0 and 2 exceed theirs
    loss, grad = run(ratios, [1.0], rows=True, clip="prefix_divergence")
    close(loss, [-r for r in ratios])
    close(grad, [0.0, -ratios[1], 0.0])
    # prefix divergence before action 1 is k3(0.15) = e^0.15 − 1.15 = 0.0118 > budget 0.01: masked too
    _, grad = run(ratios, [1.0], rows=True, clip="prefix_divergence", budget=0.01)
    close(grad, [0.0, 0.0, 0.0])
    # moves against the advantage's direction are never masked
    _, grad = run(ratios, [-1.0], rows=True, clip="prefix_divergence", budget=0.0)
    close(grad, ratios)


def test_stale_veto_drops_the_suffix_of_negative_responses():
    ratios = [1.0, math.exp(0.5), math.exp(0.1), math.exp(-0.1)]  # action 1 leaves [0.6, 1.4]: the trigger
    loss, grad = run(ratios, [-1.0], rows=True, clip="stale_veto")
    close(loss, ratios)
    close(grad, [1.0, ratios[1], 0.0, 0.0])
    loss, grad = run(ratios, [1.0], rows=True, clip="stale_veto")  # A>0: no veto, ρ = 1.65 capped at 1.4
    close(loss, [-1.0, -1.4, -ratios[2], -ratios[3]])
    close(grad, [-1.0, 0.0, -ratios[2], -ratios[3]])


def _engine(rollout):
    return StepBatch(behaviour_logp=torch.tensor(rollout, dtype=F64)[:, None])


def test_icepop_masks_mismatched_actions_and_reweights_the_rest():
    old = [0.0, math.log(0.9), math.log(0.2), math.log(0.6)]
    rollout = [0.0, math.log(0.3), math.log(0.5), math.log(0.4)]  # k = 1, 3, 0.4, 1.5
    loss, grad = run([1.1, 1.0, 1.0, 1.0], [1.0] * 4, old=old, batch=_engine(rollout), clip="icepop")
    close(loss, [-1.1, 0.0, 0.0, -1.5])
    close(grad, [-1.1, 0.0, 0.0, -1.5])
    with pytest.raises(ValueError, match=r"needs the signal 'behaviour_logp'"):
        run([1.0], [1.0], clip="icepop")


def test_truncated_is_weights():
    old = [math.log(0.9), math.log(0.2)]
    rollout = [math.log(0.3), math.log(0.4)]  # k = 3 -> 2 (truncated), 0.5
    loss, grad = run([1.1, 1.1], [1.0, 1.0], old=old, batch=_engine(rollout), clip="truncated_is")
    close(loss, [-2.2, -0.55])
    close(grad, [-2.2, -0.55])


def test_off_policy_trust_region_is_centred_on_the_iterate():
    old = [math.log(0.4), math.log(0.4)]
    rollout = [math.log(0.2), math.log(0.2)]  # π_k/π_β = 2 -> r bounds [1.6, 2.4]
    loss, grad = run([1.1, 1.3], [1.0, 1.0], old=old, batch=_engine(rollout), clip="off_policy")
    close(loss, [-2.2, -2.4])
    close(grad, [-2.2, 0.0])
    loss_ppo, grad_ppo = run([1.1, 1.3, 0.7], [1.0, 1.0, -1.0], clip="ppo")
    loss_off, grad_off = run([1.1, 1.3, 0.7], [1.0, 1.0, -1.0], clip="off_policy")  # no behaviour policy: PPO
    close(loss_off, loss_ppo.tolist())
    close(grad_off, grad_ppo.tolist())


def test_entropy_split_widens_high_entropy_actions():
    context = StepBatch(entropy=torch.tensor([[0.2, 1.0]], dtype=F64))
    loss, grad = run([1.25, 1.25], [1.0], rows=True, batch=context, clip="entropy_split")
    close(loss, [-1.2, -1.25])  # ε_high 0.2 vs 0.3
    close(grad, [0.0, -1.25])
