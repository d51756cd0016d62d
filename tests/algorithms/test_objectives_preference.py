"""Preference pairs formed inside each group by reward, and the published preference objectives on them (issue 29
item 2), against hand-computed values: DPO's loss on group pairs [187]/[285], MIPO [140] (the reference's preference
sets a softplus target margin) and TRPA [178] (length-normalised log-ratios, anisotropic top-level pairs, a clamped
k3 trust region). Each test exercises the distinguishing mechanism: which pairs form, the reference in the margin,
MIPO's modulated target, TRPA's anisotropy and trust region."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch, aggregate, loss_normalizer
from genalign.algorithms._groups import make_groups
from genalign.algorithms.objectives.preference_pairs import group_pairs, pairs_on_actions


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def run(name, logp, rewards, group_ids, *, ref=None, old=None, mask=None, **hp):
    """Call objective ``name`` on float64 inputs; return ``(logp with grad, mask, loss, metrics)``."""
    logp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(logp) if mask is None else torch.tensor(mask, dtype=torch.float64)
    ref = torch.zeros_like(logp) if ref is None else torch.tensor(ref, dtype=torch.float64)
    old = logp.detach() if old is None else torch.tensor(old, dtype=torch.float64)
    batch = StepBatch(
        mask=mask, group_ids=torch.tensor(group_ids), combined_reward=torch.tensor(rewards, dtype=torch.float64),
        ref_logp=ref, old_logp=old,
    )  # fmt: skip
    loss, metrics = OBJECTIVES.get(name)(ScoreOutput(logp=logp), torch.zeros(len(rewards)), batch, **hp)
    return logp, mask, loss, metrics


def aggregated(loss, mask):
    return aggregate(loss, mask, "seq_mean_token_mean", loss_normalizer(mask, "seq_mean_token_mean"))


def close(actual, expected, tol=1e-9):
    assert torch.allclose(torch.as_tensor(actual, dtype=torch.float64), torch.as_tensor(expected, dtype=torch.float64),
                          atol=tol), (actual, expected)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------- pairs
def pairs_of(rewards, group_ids, **options):
    groups = make_groups(torch.tensor(group_ids), len(rewards), min_size=1)
    found = group_pairs(torch.tensor(rewards), groups, **options)
    return sorted(zip(found.chosen.tolist(), found.rejected.tolist(), strict=True)), found


def test_all_pairs_are_the_ordered_pairs_of_a_group_with_a_reward_gap():
    rewards, groups = [1.0, 0.0, 0.5, float("nan"), 0.2, 0.2, 3.0], [5, 5, 5, 5, 8, 8, 9]
    pairs, found = pairs_of(rewards, groups)
    assert pairs == [(0, 1), (0, 2), (2, 1)]  # ties (group 8), NaN and a lone sample (group 9) form no pair
    close(found.gap, [1.0, 0.5, 0.5])
    assert found.per_group().tolist() == [3.0, 0.0, 0.0]
    assert pairs_of(rewards, groups, min_gap=0.5)[0] == [(0, 1)]  # the gap must exceed min_gap


def test_best_worst_is_one_pair_per_group_with_ties_to_the_lower_index():
    rewards, groups = [0.0, 1.0, 1.0, 0.0, 0.3, 0.3, 2.0, float("nan"), 0.5], [0, 0, 0, 0, 1, 1, 2, 2, 2]
    pairs, _ = pairs_of(rewards, groups, selection="best_worst")
    assert pairs == [(1, 0), (6, 8)]  # group 1 is tied; group 2's NaN is skipped
    assert pairs_of(rewards, groups, selection="best_worst", min_gap=1.0)[0] == [(6, 8)]
    with pytest.raises(ValueError, match="pairs='best'"):
        pairs_of(rewards, groups, selection="best")
    with pytest.raises(ValueError, match="min_gap=-1"):
        pairs_of(rewards, groups, min_gap=-1)


def test_pair_losses_aggregate_to_the_mean_over_groups_of_the_mean_pair_loss():
    # group A (3 samples, 2 pairs with losses 1 and 3), group B (3 samples, 1 pair with loss 4)
    groups = make_groups(torch.tensor([0, 0, 0, 1, 1, 1]), 6, min_size=1)
    found = group_pairs(torch.tensor([2.0, 1.0, 1.0, 0.0, 5.0, 0.0]), groups, selection="all", min_gap=0.0)
    assert sorted(zip(found.chosen.tolist(), found.rejected.tolist(), strict=True)) == [(0, 1), (0, 2), (4, 3), (4, 5)]
    found = group_pairs(torch.tensor([2.0, 1.0, 1.0, 0.0, 5.0, 0.0]), groups, selection="best_worst")
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    per_action = pairs_on_actions(torch.tensor([3.0, 4.0]), found, mask)  # pairs (0, 1) and (4, 3)
    close(per_action, [[4.5, 4.5], [4.5, 0.0], [0.0, 0.0], [6.0, 6.0], [6.0, 6.0], [0.0, 0.0]])  # ½·ℓ·G/P each
    close(aggregated(per_action, mask), (3.0 + 4.0) / 2)  # mean over the two groups


# -------------------------------------------------------------------------------------------------------- group_dpo
LOGP = [[-1.0, -1.0], [-2.0, 9.0], [-1.5, -1.0], [-0.5, -0.5], [-0.7, -0.1]]
MASK = [[1, 1], [1, 0], [1, 1], [1, 1], [1, 1]]
REF = [[-1.0, -1.0], [-1.0, 0.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]]
REWARDS, GROUPS = [1.0, 0.0, 0.5, 0.2, 0.2], [7, 7, 7, 9, 9]  # group 9 is tied: no pair


def test_group_dpo_is_dpo_on_every_pair_of_the_group():
    # h = Σ_t (logπθ − logπref) = (0, −1, −0.5); pairs (0,1), (0,2), (2,1); β = 1
    logp, mask, loss, metrics = run("group_dpo", LOGP, REWARDS, GROUPS, ref=REF, mask=MASK, beta=1.0)
    losses = [softplus(-1.0), softplus(-0.5), softplus(-0.5)]  # −log σ(h_w − h_l)
    total = aggregated(loss, mask)
    close(total, 3 * (sum(losses) / 3) / 5)  # G_A · J_A / N
    total.backward()
    # ∂ℓ/∂h_w = −σ(−z), ∂ℓ/∂h_l = σ(−z); G/P = 1; per valid action (∂h/∂logp_t = 1)
    g1, g5 = sigmoid(-1.0) / 5, sigmoid(-0.5) / 5
    # sample 2 wins once and loses once (same σ): no gradient
    close(logp.grad, [[-g1 - g5] * 2, [g1 + g5, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert metrics["dpo/pairs"].item() == pytest.approx(1.5) and metrics["dpo/ordered_pairs"].item() == 1.5


def test_group_dpo_margin_is_measured_against_the_reference():
    # the same policy with a reference under which the loser gained: h = (0, −2 − (−3)) = (0, 1) -> z = −1
    ref = [[-1.0, -1.0], [-3.0, 0.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]]
    _, mask, loss, _ = run("group_dpo", LOGP, REWARDS, GROUPS, ref=ref, mask=MASK, beta=1.0, pairs="best_worst")
    close(aggregated(loss, mask), 3 * softplus(1.0) / 5)  # one pair (0, 1) in group 7
    _, mask, loss, _ = run("group_dpo", LOGP, REWARDS, GROUPS, ref=REF, mask=MASK, beta=0.5, pairs="best_worst")
    close(aggregated(loss, mask), 3 * softplus(-0.5) / 5)  # β·(h_w − h_l) = 0.5·1


# ------------------------------------------------------------------------------------------------------------- MIPO
def test_mipo_target_margin_is_the_softplus_of_the_reference_preference():
    # group 0: the reference prefers the winner (K = 2); group 1: it prefers the loser (K = −3)
    logp = [[-1.0, -2.0], [-2.0, -2.0], [-1.0, -1.0], [-1.5, -0.5]]
    ref = [[-1.0, -1.0], [-3.0, -3.0], [-3.0, -3.0], [0.0, 0.0]]
    logp_t, mask, loss, metrics = run("mipo", logp, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], ref=ref, beta=2.0)
    z0 = 2.0 * (-1.5 - (-2.0) - softplus(2.0))  # s_w − s_l − log(1 + e^K)
    z1 = 2.0 * (-1.0 - (-1.0) - softplus(-3.0))
    close(aggregated(loss, mask), (2 * softplus(-z0) + 2 * softplus(-z1)) / 4)
    assert softplus(2.0) == pytest.approx(2.127, abs=1e-3) and softplus(-3.0) == pytest.approx(0.0486, abs=1e-4)
    aggregated(loss, mask).backward()
    # ∂ℓ/∂s_w = −β σ(−z); s is the mean over 2 actions; G/P = 2, seq_mean over N = 4
    gw0, gw1 = 2.0 * sigmoid(-z0) * 2 / 4 / 2, 2.0 * sigmoid(-z1) * 2 / 4 / 2
    close(logp_t.grad, [[-gw0] * 2, [gw0] * 2, [-gw1] * 2, [gw1] * 2])
    close(metrics["mipo/reference_margin"], (softplus(2.0) + softplus(-3.0)) / 2)


# ------------------------------------------------------------------------------------------------------------- TRPA
def test_trpa_weighs_pairs_won_by_the_top_level_and_adds_a_clamped_trust_region():
    # levels 1 > 0.5 > 0 = 0: pairs (0,1), (0,2), (0,3) [top level: ×2.5], (1,2), (1,3); λ = mean logπθ − mean logπref
    logp = [[-1.0, -1.0], [-2.0, -1.0], [-1.0, -3.0], [-2.0, -2.0]]
    ref = [[-1.5, -1.5], [-1.0, -1.0], [-2.0, -2.0], [-2.0, -2.0]]
    old = [[-1.0, -1.0], [-2.0, -1.0], [-1.0, -3.0], [-2.0, -22.0]]  # one action 20 nats below: k3 clamps at 10
    logp_t, mask, loss, metrics = run("trpa", logp, [1.0, 0.5, 0.0, 0.0], [4] * 4, ref=ref, old=old, beta=0.1)
    lam = [0.5, -0.5, 0.0, 0.0]
    pairs = [(0, 1, 2.5), (0, 2, 2.5), (0, 3, 2.5), (1, 2, 1.0), (1, 3, 1.0)]
    mean_pair_loss = sum(softplus(-a * 0.1 * (lam[w] - lam[r])) for w, r, a in pairs) / 5
    trust_kl = 10.0 / 8  # k3(δ = −20) = e^{−20} + 19 clamped to 10, the other 7 actions 0: token mean over 8 actions
    close(metrics["trpa/trust_region_kl"], trust_kl)
    close(aggregated(loss, mask), mean_pair_loss + 1e-3 * trust_kl)  # G·J/N with G = N, plus c·KL
    aggregated(loss, mask).backward()
    # sample 0 wins 3 top-level pairs: ∂/∂λ_0 = −Σ 0.25 σ(−0.25 (λ_0 − λ_l)) / 5; ∂λ/∂logp_t = 1/2; the clamped
    # trust-region action contributes no gradient
    grad_0 = -sum(0.25 * sigmoid(-0.25 * (0.5 - lam[loser])) for loser in (1, 2, 3)) / 5 / 2
    close(logp_t.grad[0], [grad_0, grad_0])
    assert logp_t.grad[3, 1].item() == pytest.approx(logp_t.grad[3, 0].item())  # clamped: no extra trust-region pull
    _, mask, loss, _ = run("trpa", logp, [1.0, 0.5, 0.0, 0.0], [4] * 4, ref=ref, beta=0.1, anisotropy=1.0)
    close(aggregated(loss, mask), sum(softplus(-0.1 * (lam[w] - lam[r])) for w, r, _ in pairs) / 5)


# ------------------------------------------------------------------------------------------------------- all three
@pytest.mark.parametrize("name", ["group_dpo", "mipo", "trpa"])
def test_preference_objectives_declare_their_inputs_and_name_what_is_missing(name):
    meta = OBJECTIVES.meta(name)
    assert meta["whole_groups"] and meta["aggregation"] == "seq_mean_token_mean"
    assert {"ref_logp", "combined_reward"} <= set(meta["needs"])
    logp = torch.zeros(2, 1, requires_grad=True)
    batch = StepBatch(mask=torch.ones(2, 1), group_ids=torch.tensor([0, 0]), ref_logp=torch.zeros(2, 1))
    with pytest.raises(ValueError, match=rf"objective '{name}' needs the signal 'combined_reward'"):
        OBJECTIVES.get(name)(ScoreOutput(logp=logp), torch.zeros(2), batch)
    with pytest.raises(ValueError, match="beta=0"):
        run(name, [[-1.0], [-2.0]], [1.0, 0.0], [0, 0], beta=0.0)


def test_a_group_without_pairs_still_gives_a_differentiable_zero_loss():
    logp, mask, loss, metrics = run("group_dpo", [[-1.0], [-2.0]], [0.5, 0.5], [0, 0])
    aggregated(loss, mask).backward()
    assert loss.abs().max().item() == 0 and logp.grad.abs().max().item() == 0
    assert metrics["dpo/pairs"].item() == 0 and metrics["dpo/margin"].item() == 0


def test_every_preference_seed_that_fits_the_backend_is_cited_by_a_registered_objective():
    sources = " ".join(OBJECTIVES.meta(name)["source"] for name in OBJECTIVES.names())
    missing = [n for n in (12, 39, 48, 97, 140, 178, 187, 285, 326) if f"[{n}]" not in sources]
    assert not missing, f"no objective cites {missing}"
