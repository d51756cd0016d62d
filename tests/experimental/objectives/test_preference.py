"""Experimental preference objectives on group pairs (issue 29 item 2) against hand-computed values: TDPO [48] and
Ra-DPO [326] (sequential forward KL / risk from sampled actions), P3O [97] (clipped pairwise trajectory ratios),
CPO [39] (non-negative target margin) and CITA [12] (DPO + SFT + quadratic anchor)."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES
from genalign.experimental.objectives.token_preference import forward_kl_terms, sequential_risk
from tests.algorithms.test_objectives_preference import aggregated, close, run, sigmoid, softplus


# ------------------------------------------------------------------------------------- sampled-action forward KL
def test_forward_kl_terms_are_unbiased_with_the_exact_gradient_on_the_policy_samples():
    # a 3-action policy: E_{a~πθ}[term(a)] = KL(π_ref ‖ πθ) and E_{a~πθ}[∇term(a)] = ∇KL (the sampled actions are
    # constants of the loss, so the term's own gradient must carry the whole KL gradient)
    logits = torch.tensor([0.3, -0.2, 1.1], dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64), 0)
    logp = torch.log_softmax(logits, 0)
    terms = forward_kl_terms(logp[:, None], ref[:, None], torch.ones(3, 1, dtype=torch.float64))[:, 0]  # [3]
    probs = logp.exp().detach()
    exact = (ref.exp() * (ref - logp)).sum()
    close((probs * terms).sum(), exact.detach())  # unbiased
    (grad,) = torch.autograd.grad((probs * terms).sum(), logits, retain_graph=True)
    (expected,) = torch.autograd.grad(exact, logits)
    close(grad, expected)
    one = forward_kl_terms(torch.tensor([[-1.0]], requires_grad=True), torch.tensor([[-2.0]]), torch.ones(1, 1))
    close(one, [[1 - 2 / math.e]])  # r log r − r + 1 with r = e^{−1}


# ------------------------------------------------------------------------------------------------------------ TDPO
@pytest.mark.parametrize("variant", [1, 2])
def test_tdpo_corrects_the_margin_by_the_sequential_kl_difference(variant):
    # one pair, one action each: h_w = −1 − (−2) = 1, h_l = −3 − (−1) = −2; r_w = e^{−1}, r_l = e^{2}
    logp, mask, loss, metrics = run(
        "tdpo", [[-1.0], [-3.0]], [1.0, 0.0], [0, 0], ref=[[-2.0], [-1.0]], beta=0.5, variant=variant, alpha=0.5
    )
    kl_w, kl_l = 1 - 2 / math.e, math.exp(2) * 2 - math.exp(2) + 1  # r log r − r + 1
    weight = 1.0 if variant == 1 else 0.5
    z = 0.5 * (3.0 - weight * (kl_l - kl_w))
    close(aggregated(loss, mask), softplus(-z))  # G/P = 2 over N = 2
    aggregated(loss, mask).backward()
    # ∂δ/∂logp = −r; variant 1: ∂z/∂logp_w = β(1 − r_w), ∂z/∂logp_l = β(−1 + r_l); variant 2 holds δ_w constant
    r_w, r_l = math.exp(-1), math.exp(2)
    dz_w = 0.5 * (1 - r_w) if variant == 1 else 0.5
    dz_l = 0.5 * (-1 + weight * r_l)
    close(logp.grad, [[-sigmoid(-z) * dz_w], [-sigmoid(-z) * dz_l]])
    close(metrics["tdpo/divergence"], (kl_w + kl_l) / 2)


# ---------------------------------------------------------------------------------------------------------- Ra-DPO
def test_ra_dpo_keeps_the_actions_above_the_value_at_risk_of_the_log_ratio():
    # log r = (−1, 0.5, 2, ·): the 0.05-quantile lies between −1 and 0.5, so the action with log r = −1 is dropped
    logp = torch.tensor([[-1.0, -2.0, -3.0, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[-2.0, -1.5, -1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    kept = sum(math.exp(x) * x - math.exp(x) + 1 for x in (0.5, 2.0))
    close(sequential_risk(logp, ref, mask, 0.95), [kept])
    close(sequential_risk(logp, ref, mask, 1.0), [kept])  # the 0-quantile is the minimum: still strictly above it
    everything = kept + (1 - 2 / math.e)
    close(forward_kl_terms(logp, ref, mask).sum(1), [everything])  # TDPO's δ keeps all three
    # the loss is TDPO1's with ρ in place of δ: one pair (sample 0 wins)
    logp2 = [[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]]
    ref2 = [[-2.0, -1.5, -1.0], [-1.0, -1.0, -1.0]]
    _, mask2, loss, _ = run("ra_dpo", logp2, [1.0, 0.0], [0, 0], ref=ref2, beta=0.5)
    h_w = (-6.0) - (-4.5)
    close(aggregated(loss, mask2), softplus(-0.5 * (h_w - (0.0 - kept))))


# ------------------------------------------------------------------------------------------------------------- P3O
def test_p3o_clips_each_trajectory_ratio_with_the_pairwise_advantage():
    # Δ = (1 − 0)/2; log ρ_w = 0.5 (clipped at 1.2, no gradient), log ρ_l = −0.1 (inside the range)
    old = [[-1.25, -1.25], [-1.95, -1.95]]
    logp, mask, loss, metrics = run("p3o", [[-1.0, -1.0], [-2.0, -2.0]], [1.0, 0.0], [0, 0], old=old, eps=0.2)
    close(aggregated(loss, mask), -1.2 * 0.5 + math.exp(-0.1) * 0.5)
    aggregated(loss, mask).backward()
    close(logp.grad, [[0.0, 0.0], [math.exp(-0.1) * 0.5] * 2])  # only the loser's ratio moves
    assert metrics["p3o/clip_frac"].item() == 0.5
    # joint: the relative ratio e^{0.6} is clipped at 1.2 -> no gradient at all
    logp, mask, loss, metrics = run("p3o", [[-1.0, -1.0], [-2.0, -2.0]], [1.0, 0.0], [0, 0], old=old, clip="joint")
    close(aggregated(loss, mask), -1.2 * 0.5)
    aggregated(loss, mask).backward()
    assert logp.grad.abs().max().item() == 0 and metrics["p3o/clip_frac"].item() == 1.0


def test_p3o_is_the_pairwise_policy_gradient_on_policy_and_ignores_a_reward_offset():
    logp, mask, loss, _ = run("p3o", [[-1.0], [-2.0], [-1.5]], [1.0, 0.0, 0.5], [0, 0, 0])
    aggregated(loss, mask).backward()
    # pairs (0,1) Δ=½, (0,2) Δ=¼, (2,1) Δ=¼; G/P = 1, N = 3: ∇ = −(1/3) Σ_p Δ (∇logπ_w − ∇logπ_l)
    close(logp.grad, [[-(0.5 + 0.25) / 3], [(0.5 + 0.25) / 3], [0.0]])
    shifted, mask, loss2, _ = run("p3o", [[-1.0], [-2.0], [-1.5]], [101.0, 100.0, 100.5], [0, 0, 0])
    aggregated(loss2, mask).backward()
    close(shifted.grad, logp.grad)


# ------------------------------------------------------------------------------------------------------------- CPO
def test_constrained_dpo_floors_the_reference_target_margin():
    # the policy still prefers the loser (Δθ = −1), the reference even more (Δref = −2): DPO is content (z = +0.1)
    logp, ref = [[-3.0], [-2.0]], [[-4.0], [-2.0]]
    _, mask, loss, metrics = run("constrained_dpo", logp, [1.0, 0.0], [0, 0], ref=ref, beta=0.1)
    close(aggregated(loss, mask), softplus(0.1))  # z = 0.1·(Δθ − max(Δref, 0)) = −0.1
    _, _, dpo, _ = run("group_dpo", logp, [1.0, 0.0], [0, 0], ref=ref, beta=0.1)
    close(aggregated(dpo, mask), softplus(-0.1))
    assert metrics["cpo/floored_targets"].item() == 1.0
    # a reference that ranks the pair right: identical to DPO
    _, _, loss, _ = run("constrained_dpo", logp, [1.0, 0.0], [0, 0], ref=[[-2.0], [-4.0]], beta=0.1)
    _, _, dpo, _ = run("group_dpo", logp, [1.0, 0.0], [0, 0], ref=[[-2.0], [-4.0]], beta=0.1)
    close(loss, dpo)
    _, _, loss, _ = run("constrained_dpo", logp, [1.0, 0.0], [0, 0], ref=ref, beta=0.1, margin_floor=0.5)
    close(aggregated(loss, mask), softplus(0.15))


# ------------------------------------------------------------------------------------------------------------ CITA
def test_cita_adds_sft_on_the_chosen_sample_and_a_quadratic_anchor():
    logp, ref = [[-1.0, -2.0], [-2.0, -2.0]], [[-1.5, -1.5], [-1.0, -1.0]]
    logp_t, mask, loss, metrics = run(
        "cita", logp, [1.0, 0.0], [0, 0], ref=ref, beta=1.0, sft_coef=0.5, anchor_coef=2.0
    )
    dpo = softplus(-(0.0 - (-2.0)))  # h = (0, −2)
    sft = 0.5 * 1.5  # −mean_t logπθ(y_w)
    anchor = 2.0 * 0.5 * ((0.25 + 0.25) / 2 + (1.0 + 1.0) / 2)  # ½ mean_t (logπθ − logπref)² of both samples
    close(aggregated(loss, mask), dpo + sft + anchor)
    close(metrics["cita/anchor"], (0.125 + 0.5) / 2)
    aggregated(loss, mask).backward()
    # sample 0: −σ(−2) (DPO) − 0.5/2 (SFT mean) + 2·(logπθ − logπref)/2 per action
    close(logp_t.grad[0], [-sigmoid(-2.0) - 0.25 + 0.5, -sigmoid(-2.0) - 0.25 - 0.5])


@pytest.mark.parametrize(
    ("name", "bad"),
    [("tdpo", {"variant": 3}), ("ra_dpo", {"confidence": 0.0}), ("p3o", {"clip": "both"}),
     ("constrained_dpo", {"margin_floor": -1.0}), ("cita", {"sft_coef": -0.1})],
)  # fmt: skip
def test_bad_hyper_parameters_are_named(name, bad):
    key = next(iter(bad))
    with pytest.raises(ValueError, match=key):
        run(name, [[-1.0], [-2.0]], [1.0, 0.0], [0, 0], **bad)
    assert OBJECTIVES.tier(name) == "experimental"
