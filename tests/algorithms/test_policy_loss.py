"""Policy objectives: hand-computed losses and gradients per clip form and ratio level, on-policy identity, metrics,
exploding ratios, one-action equivalence of the levels, bad input."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genalign.algorithms import (
    AGGREGATIONS,
    CLIP_FORMS,
    RATIO_LEVELS,
    HyperparameterError,
    StepBatch,
    aggregate,
    check_objective_hyperparameters,
    loss_normalizer,
    policy_loss,
)
from genalign.registry import UnknownOptionError

F64 = torch.float64


def token_case(ratios: list[float], advantages: list[float], **kwargs):
    """One action per sequence: returns (loss [N], d loss.sum() / d logp [N])."""
    old = torch.zeros(len(ratios), 1, dtype=F64)
    logp = torch.log(torch.tensor(ratios, dtype=F64))[:, None].requires_grad_(True)
    mask = torch.ones_like(old)
    loss, _ = policy_loss(logp, old, torch.tensor(advantages, dtype=F64), mask, **kwargs)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss[:, 0].detach(), grad[:, 0]


#: levels whose weight of action t depends on its prefix: on-policy their gradient is not per-action REINFORCE
PREFIX_LEVELS = ("cumulative", "min_prefix", "prefix_geometric")
#: product ratios over several actions: at ratio 1 each action's gradient is its unit's size times REINFORCE's
#: (MA-RLHF's macro-action objective, mean over macro actions; tests/experimental/ratio_levels/test_macro.py)
PRODUCT_LEVELS = ("macro_action",)


def full_context(old_logp: torch.Tensor) -> StepBatch:
    """Every optional input, so that every option runs: entropy, rollout log-probs equal to ``old_logp`` (no
    engine mismatch), group reward std and training progress."""
    n, t = old_logp.shape
    entropy = torch.linspace(0.1, 2.0, n * t, dtype=old_logp.dtype).view(n, t)
    return StepBatch(
        entropy=entropy,
        behaviour_logp=old_logp.detach().clone(),
        group_reward_std=torch.full((n,), 0.5, dtype=old_logp.dtype),
        progress=0.5,
    )


def assert_close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------------- clip forms
def test_ppo_clips_each_side_with_its_advantage_sign():
    loss, grad = token_case([1.5, 1.5, 0.5, 0.5], [1, -1, 1, -1], clip="ppo", eps_low=0.2, eps_high=0.2)
    # A>0, ρ=1.5 -> capped at 1.2 (no grad); A<0, ρ=1.5 -> unclipped; A>0, ρ=0.5 -> unclipped; A<0, ρ=0.5 -> 0.8
    assert_close(loss, [-1.2, 1.5, -0.5, 0.8])
    assert_close(grad, [0.0, 1.5, -0.5, 0.0])


def test_ppo_clip_higher():
    loss, grad = token_case([1.25, 1.3, 0.75], [1, 1, -1], clip="ppo", eps_low=0.2, eps_high=0.28)
    assert_close(loss, [-1.25, -1.28, 0.8])
    assert_close(grad, [-1.25, 0.0, 0.0])


def test_dual_clip_caps_negative_advantage_ratios():
    loss, grad = token_case([4.0, 2.0, 4.0], [-1, -1, 1], clip="dual_clip", dual_clip_c=3.0)
    assert_close(loss, [3.0, 2.0, -1.2])
    assert_close(grad, [0.0, 2.0, 0.0])


def test_cispo_keeps_the_gradient_with_a_clipped_detached_weight():
    loss, grad = token_case([1.5, 0.1, 0.5], [1, -1, 1], clip="cispo", eps_high=0.28)
    # weight sg(clip(ρ)) (no lower bound by default); gradient of −sg(w)·A·logπ is −w·A
    assert_close(loss, [-1.28, 0.1, -0.5])
    assert_close(grad, [-1.28, 0.1, -0.5])
    loss, grad = token_case([0.5], [1], clip="cispo", eps_low=0.2, eps_high=0.28)
    assert_close(loss, [-0.8])
    assert_close(grad, [-0.8])


def test_sapo_soft_gate():
    ratios, advantages = [1.5, 1.0, 0.5], [1, 1, -1]
    loss, grad = token_case(ratios, advantages, clip="sapo", tau_pos=1.0, tau_neg=2.0)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected_loss, expected_grad = [], []
    for rho, a in zip(ratios, advantages):
        tau = 1.0 if a > 0 else 2.0
        s = sig(tau * (rho - 1))
        expected_loss.append(-a * s * 4 / tau)
        expected_grad.append(-a * 4 * s * (1 - s) * rho)  # d f(ρ)/d logπ = 4σ(1−σ)·ρ
    assert_close(loss, expected_loss)
    assert_close(grad, expected_grad)
    assert expected_loss[1] == -2.0 and expected_grad[1] == -1.0  # value 2/τ, slope 1 at ρ = 1


def test_no_clip_is_importance_weighted_reinforce():
    loss, grad = token_case([3.0, 0.5], [1, -2], clip="none")
    assert_close(loss, [-3.0, 1.0])
    assert_close(grad, [-3.0, 1.0])


# ----------------------------------------------------------------------------------------------------- ratio levels
def two_token_case(ratios: list[float], advantages, *, ratio_level: str, **kwargs):
    """One sequence with two valid actions and one padded action (logp = -inf there)."""
    old = torch.zeros(1, 3, dtype=F64)
    logp = torch.tensor([[math.log(ratios[0]), math.log(ratios[1]), -math.inf]], dtype=F64).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0]])
    loss, metrics = policy_loss(logp, old, advantages, mask, ratio_level=ratio_level, **kwargs)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss[0].detach(), grad[0], metrics


def test_gspo_sequence_ratio_is_length_normalised_and_shared():
    s = math.sqrt(1.1 * 1.3)
    loss, grad, metrics = two_token_case([1.1, 1.3], torch.tensor([1.0], dtype=F64), ratio_level="sequence")
    assert_close(loss, [-s, -s, 0.0])
    assert_close(grad, [-s, -s, 0.0])  # 2 actions × (−s · 1/2) per token
    assert metrics["ratio_mean"].item() == pytest.approx(s, rel=1e-12)
    # small GSPO clip: s > 1 + 3e-4 with A > 0 -> clipped, no gradient
    loss, grad, metrics = two_token_case(
        [1.1, 1.3], torch.tensor([1.0], dtype=F64), ratio_level="sequence", eps_low=3e-4, eps_high=4e-4
    )
    assert_close(loss, [-1.0004, -1.0004, 0.0])
    assert_close(grad, [0.0, 0.0, 0.0])
    assert metrics["clip_frac_high"].item() == 1.0


def test_gspo_token_form_has_sequence_value_and_per_token_gradient():
    s = math.sqrt(1.1 * 1.3)
    per_token = torch.tensor([[1.0, 2.0, 0.0]], dtype=F64)
    loss, grad, _ = two_token_case([1.1, 1.3], per_token, ratio_level="sequence_token")
    assert_close(loss, [-s, -2 * s, 0.0])
    assert_close(grad, [-s, -2 * s, 0.0])
    # the plain sequence level spreads the gradient of the summed sequence loss over its tokens instead
    loss, grad, _ = two_token_case([1.1, 1.3], per_token, ratio_level="sequence")
    assert_close(grad, [-1.5 * s, -1.5 * s, 0.0])


def test_gmpo_geometric_mean_of_clipped_token_ratios():
    geo = math.sqrt(1.1 * 1.2)  # 1.6 is clipped to 1.2 (A > 0) before the geometric mean
    loss, grad, metrics = two_token_case([1.1, 1.6], torch.tensor([1.0], dtype=F64), ratio_level="geometric")
    assert_close(loss, [-geo, -geo, 0.0])
    assert_close(grad, [-geo, 0.0, 0.0])  # the clipped token gets no gradient
    assert metrics["clip_frac_high"].item() == 0.5
    loss, _, _ = two_token_case([0.5, 0.9], torch.tensor([-1.0], dtype=F64), ratio_level="geometric")
    assert_close(loss, [math.sqrt(0.8 * 0.9)] * 2 + [0.0])  # 0.5 floored at 0.8 for A < 0


# ------------------------------------------------------------------------------------------------------- metrics
def test_metrics_hand_computed():
    logp = torch.log(torch.tensor([[1.5, 0.5], [1.0, 7.0]], dtype=F64))
    old = torch.zeros_like(logp)
    advantages = torch.tensor([[1.0, -1.0], [1.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0]])
    _, m = policy_loss(logp, old, advantages, mask)
    k3 = lambda r: r - math.log(r) - 1  # noqa: E731
    expected = {
        "clip_frac_low": 1 / 3,
        "clip_frac_high": 1 / 3,
        "clip_frac": 2 / 3,
        "ratio_mean": 1.0,
        "ratio_min": 0.5,
        "ratio_max": 1.5,
        "approx_kl": (k3(1.5) + k3(0.5)) / 3,
    }
    assert set(m) == set(expected)
    for key, value in expected.items():
        assert m[key].item() == pytest.approx(value, rel=1e-12), key
        assert m[key].ndim == 0 and not m[key].requires_grad


def test_exploding_ratios_and_minus_inf_padding_stay_finite():
    logp = torch.tensor([[800.0, -math.inf], [900.0, 0.0]], dtype=F64, requires_grad=True)
    old = torch.zeros(2, 2, dtype=F64)
    mask = torch.tensor([[1, 0], [1, 1]])
    for level, clip in itertools.product(RATIO_LEVELS.names(), ["ppo", "cispo", "sapo"]):
        loss, _ = policy_loss(
            logp,
            old,
            torch.tensor([1.0, 1.0], dtype=F64),
            mask,
            ratio_level=level,
            clip=clip,
            batch=full_context(old),
        )
        (grad,) = torch.autograd.grad(loss.sum(), logp)
        assert torch.isfinite(loss).all() and torch.isfinite(grad).all(), (level, clip)
    loss, _ = policy_loss(logp, old, torch.tensor([-1.0, -1.0], dtype=F64), mask, clip="dual_clip")
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all()


# ------------------------------------------------------------------------------------------------- on-policy identity
def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    n, t = 6, 5
    lengths = torch.tensor([5, 3, 1, 4, 2, 5])
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(F64)  # [N, T]
    logp = (-torch.rand(n, t, generator=gen, dtype=F64) * 3).requires_grad_(True)
    advantages = torch.randn(n, generator=gen, dtype=F64)
    return logp, mask, advantages


#: the core levels and clip forms against every aggregation; every other level x clip form once (token_mean)
CORE_LEVELS, CORE_CLIPS = (
    ("token", "sequence", "sequence_token", "geometric"),
    ("ppo", "dual_clip", "cispo", "sapo", "none"),
)
ON_POLICY_CASES = sorted(
    set(itertools.product(CORE_LEVELS, CORE_CLIPS, AGGREGATIONS.names()))
    | set(
        itertools.product(
            [name for name in RATIO_LEVELS.names() if name not in PREFIX_LEVELS + PRODUCT_LEVELS],
            CLIP_FORMS.names(),
            ["token_mean"],
        )
    )
)


@pytest.mark.parametrize(("level", "clip", "mode"), ON_POLICY_CASES)
def test_on_policy_ratio_is_one_and_gradient_is_reinforce(level, clip, mode):
    logp, mask, advantages = _batch()
    old = logp.detach().clone()
    kwargs = {"advantages": advantages, "max_len": 5}
    normalizer = loss_normalizer(mask, mode, **kwargs)
    loss, metrics = policy_loss(logp, old, advantages, mask, ratio_level=level, clip=clip, batch=full_context(old))
    assert metrics["ratio_min"].item() == 1.0 and metrics["ratio_max"].item() == 1.0
    assert metrics["clip_frac"].item() == 0.0 and metrics["approx_kl"].item() == 0.0
    (grad,) = torch.autograd.grad(aggregate(loss, mask, mode, normalizer, **kwargs), logp)
    reinforce = -advantages[:, None] * logp  # [N, T]
    (expected,) = torch.autograd.grad(aggregate(reinforce, mask, mode, normalizer, **kwargs), logp)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)
    if clip != "sapo":  # SAPO's gate is 2/τ at ρ = 1; every other form has loss value −A
        torch.testing.assert_close(loss, torch.where(mask > 0, -advantages[:, None].expand_as(mask), 0.0))


@pytest.mark.parametrize(("level", "clip"), list(itertools.product(["token", "sequence_token"], CLIP_FORMS.names())))
def test_on_policy_per_action_advantages(level, clip):
    logp, mask, _ = _batch(1)
    advantages = torch.randn(mask.shape, dtype=F64)
    loss, _ = policy_loss(logp, logp.detach(), advantages, mask, ratio_level=level, clip=clip, batch=full_context(logp))
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    torch.testing.assert_close(grad, -advantages * mask, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------------- property tests
@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-1.5, 1.5), st.floats(-3, 3)), min_size=1, max_size=6),
    st.sampled_from(CLIP_FORMS.names()),
)
def test_levels_agree_for_one_action_sequences(rows, clip):
    log_ratio = torch.tensor([[r] for r, _ in rows], dtype=F64)
    advantages = torch.tensor([a for _, a in rows], dtype=F64)
    old = torch.zeros_like(log_ratio)
    mask = torch.ones_like(log_ratio)
    results = {}
    for level in RATIO_LEVELS.names():
        if level == "bernoulli_variance":  # a different ratio (variance ratio), not an aggregate of token ratios
            continue
        if level == "future_influence":  # FIPO's weight reads the action's own log-ratio: GRPO only at ratio 1
            continue
        logp = log_ratio.clone().requires_grad_(True)
        loss, metrics = policy_loss(logp, old, advantages, mask, ratio_level=level, clip=clip, batch=full_context(old))
        (grad,) = torch.autograd.grad(loss.sum(), logp)
        results[level] = (loss.detach(), grad, metrics["ratio_mean"], metrics["clip_frac"])
    for level, (loss, grad, ratio, frac) in results.items():
        token_loss, token_grad, token_ratio, token_frac = results["token"]
        torch.testing.assert_close(loss, token_loss, rtol=1e-12, atol=1e-12, msg=level)
        torch.testing.assert_close(grad, token_grad, rtol=1e-12, atol=1e-12, msg=level)
        torch.testing.assert_close(ratio, token_ratio, rtol=1e-12, atol=1e-12, msg=level)
        assert frac == token_frac, level


# ------------------------------------------------------------------------------------------------------- bad input
def test_unknown_level_or_clip_lists_valid_names():
    logp, mask, adv = _batch()
    with pytest.raises(UnknownOptionError, match=r"unknown ratio level 'seq'.*Valid names: .*geometric, .*sequence, "):
        policy_loss(logp, logp.detach(), adv, mask, ratio_level="seq")
    with pytest.raises(UnknownOptionError, match=r"Valid names: .*cispo, dual_clip, .*none, .*ppo, .*sapo"):
        policy_loss(logp, logp.detach(), adv, mask, clip="clip")


def test_unknown_hyperparameter_for_the_clip_form():
    logp, mask, adv = _batch()
    with pytest.raises(HyperparameterError, match=r"'sapo'.*'eps_high'.*tau_pos, tau_neg"):
        policy_loss(logp, logp.detach(), adv, mask, clip="sapo", eps_high=0.2)
    with pytest.raises(HyperparameterError, match=r"Did you mean 'eps_high'"):
        check_objective_hyperparameters("token", "ppo", {"eps_hgh": 0.3})
    check_objective_hyperparameters("geometric", "dual_clip", {"dual_clip_c": 3.0, "eps_low": 0.1})


def test_keywords_given_together_are_split_between_the_level_and_the_clip_form():
    check_objective_hyperparameters("holder", "ppo", {"holder_p": 2.0, "eps_high": 0.28})
    with pytest.raises(
        HyperparameterError, match=r"ratio level 'holder' with clip form 'ppo'.*Did you mean 'holder_p'"
    ):
        check_objective_hyperparameters("holder", "ppo", {"holder_q": 2.0})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"old_logp": torch.zeros(6, 4, dtype=F64)}, r"old_logp must have shape \[N, T\]=\[6, 5\]"),
        ({"advantages": torch.zeros(7, dtype=F64)}, r"advantages must have shape \[N\]=\[6\] or \[N, T\]=\[6, 5\]"),
        ({"advantages": torch.zeros(1, 5, dtype=F64)}, r"advantages must have shape"),
        ({"mask": torch.ones(6, 1)}, r"mask must have shape \[N, T\]=\[6, 5\]"),
        ({"logp": torch.zeros(6, dtype=F64)}, r"logp must have shape \[N, T\]"),
    ],
)
def test_wrong_shapes_raise_instead_of_broadcasting(change, match):
    logp, mask, adv = _batch()
    args = {"logp": logp, "old_logp": logp.detach(), "advantages": adv, "mask": mask} | change
    with pytest.raises(ValueError, match=match):
        policy_loss(args["logp"], args["old_logp"], args["advantages"], args["mask"])


def test_invalid_clip_ranges_raise():
    logp, mask, adv = _batch()
    with pytest.raises(ValueError, match="eps_low must be in"):
        policy_loss(logp, logp.detach(), adv, mask, eps_low=1.0)
    with pytest.raises(ValueError, match="dual_clip_c must be > 1"):
        policy_loss(logp, logp.detach(), adv, mask, clip="dual_clip", dual_clip_c=0.5)


def test_bfloat16_log_probs_are_promoted_to_float32():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.bfloat16, requires_grad=True)
    loss, metrics = policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2))
    assert loss.dtype == torch.float32 and metrics["ratio_mean"].item() == 1.0
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert grad.dtype == torch.bfloat16 and grad.tolist() == [[-1.0, -1.0]]
