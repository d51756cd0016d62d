"""Group-level objectives of issue 17, against hand-computed values: ConSPO [74] (group InfoNCE with a scheduled
margin), DisCO [289] (discriminative score gap, squared-hinge KL), GVPO [139] and Reg-GRPO [177] (advantage
regressions). Each test exercises the method's distinguishing mechanism: the softmax weighting of positives and
negatives, the margin, the log-sum-exp over negatives and the KL hinge, the shrinking / reversing regression residual.
"""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import OBJECTIVES, ScoreOutput, StepBatch, aggregate, loss_normalizer


def _run(name, logp, advantages, group_ids, *, old=None, mask=None, progress=None, **hp):
    logp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(logp) if mask is None else torch.tensor(mask, dtype=torch.float64)
    old = logp.detach() if old is None else torch.tensor(old, dtype=torch.float64)
    context = StepBatch(old_logp=old, mask=mask, group_ids=torch.tensor(group_ids), progress=progress)
    loss, metrics = OBJECTIVES.get(name)(ScoreOutput(logp=logp), torch.tensor(advantages), context, **hp)
    return logp, mask, loss, metrics


def _aggregated(loss, mask):
    """seq_mean_token_mean over the batch: ``mean_i`` of each sample's per-action loss."""
    return aggregate(loss, mask, "seq_mean_token_mean", loss_normalizer(mask, "seq_mean_token_mean"))


def _close(actual, expected, tol=1e-9):
    assert torch.allclose(torch.as_tensor(actual, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                          atol=tol), (actual, expected)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------- ConSPO
def test_conspo_contrasts_each_positive_with_the_group_negatives():
    # group 0: s = (−1, −2, −2), one positive; group 1: two positives, no negative -> no contrast
    logp, mask, loss, metrics = _run(
        "conspo", [[-1.0, -1.0], [-2.0, -2.0], [-3.0, -1.0], [-0.5, -0.5], [-0.7, -0.1]],
        [1.0, -0.5, -0.5, 0.3, 0.3], [0, 0, 0, 1, 1], margin_end=0.0,
    )  # fmt: skip
    nce = math.log(1 + 2 * math.exp(-1))  # −log(e^{−1} / (e^{−1} + 2 e^{−2})) = 0.5514
    _close(loss, [[3 * nce] * 2, [0.0] * 2, [0.0] * 2, [0.0] * 2, [0.0] * 2])  # G/|P| = 3 on the positive's actions
    total = _aggregated(loss, mask)
    _close(total, 3 * nce / 5)  # (1/N) Σ_q G_q J_q = mean over samples
    total.backward()
    # ∂ℓ/∂s_pos = −(1 − p_pos), ∂ℓ/∂s_neg = p_neg = e^{−2}/(e^{−1} + 2e^{−2})
    p_pos = 1 / (1 + 2 * math.exp(-1))  # 0.5761
    p_neg = math.exp(-2) / (math.exp(-1) + 2 * math.exp(-2))
    # d total / d logp_t = (1/5)·3·∂ℓ/∂s·(1/2 per token)
    _close(logp.grad, [[-0.3 * (1 - p_pos)] * 2, [0.3 * p_neg] * 2, [0.3 * p_neg] * 2, [0.0] * 2, [0.0] * 2])
    assert metrics["conspo/groups_contrasted"].item() == pytest.approx(0.5)
    assert metrics["conspo/positive_prob"].item() == pytest.approx((p_pos + 1 + 1) / 3)  # no negatives: p = 1


def test_conspo_margin_follows_training_progress():
    # m = 0 + (1 − 0)·0.5 = 0.5: ℓ = log(1 + 2 e^{−2} / e^{−1.5}) = log(1 + 2 e^{−0.5})
    _, _, loss, metrics = _run(
        "conspo", [[-1.0], [-2.0], [-2.0]], [1.0, -0.5, -0.5], [0, 0, 0], progress=0.5, margin_end=1.0
    )
    _close(loss[0, 0], 3 * math.log(1 + 2 * math.exp(-0.5)))
    assert metrics["conspo/margin"].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"needs the signal 'progress'"):
        _run("conspo", [[-1.0], [-2.0]], [1.0, -1.0], [0, 0], margin_end=1.0)


# ----------------------------------------------------------------------------------------------------------- DisCO
def test_disco_dro_raises_positives_and_lowers_negatives_by_their_softmax():
    # s = (−1, −2, −3, −4) (second sample has one padded action); τ = 1
    logp, mask, loss, metrics = _run(
        "disco", [[-1.0, -1.0], [-2.0, 9.0], [-3.0, -3.0], [-5.0, -3.0]], [1.0, 1.0, -1.0, -1.0], [0, 0, 0, 0],
        mask=[[1, 1], [1, 0], [1, 1], [1, 1]], tau=1.0,
    )  # fmt: skip
    lse = math.log(math.exp(-3) + math.exp(-4))
    j = -1.5 - lse  # mean_P s − τ log Σ_N e^{s/τ} = 1.18674
    _close(loss[:, 0], [2 * (lse + 1), 2 * (lse + 2), 0.0, 0.0])  # G/|P| = 2 on each positive
    assert loss[1, 1] == 0  # padding
    total = _aggregated(loss, mask)
    _close(total, -j)
    total.backward()
    soft = [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))]  # softmax of the negatives' scores
    # ∂(−J)/∂s = (−1/2, −1/2, soft_2, soft_3), spread over each sample's valid actions
    _close(logp.grad, [[-0.25, -0.25], [-0.5, 0.0], [soft[0] / 2] * 2, [soft[1] / 2] * 2])
    assert metrics["disco/groups_contrasted"].item() == 1.0 and metrics["disco/kl"].item() == 0.0


def test_disco_basic_and_likelihood_ratio_scores():
    _, mask, loss, _ = _run(
        "disco", [[-1.0], [-2.0], [-3.0], [-4.0]], [1.0, 1.0, -1.0, -1.0], [0] * 4, negatives="basic"
    )
    _close(_aggregated(loss, mask), -((-1.5) - (-3.5)))  # −(mean_P s − mean_N s) = −2
    # likelihood_ratio: s_i = mean_t ρ_it; on-policy every s_i = 1 and ∂s_i/∂logp_t = ρ_t / |o_i| = 1/|o_i|
    logp, mask, loss, _ = _run(
        "disco", [[-1.0, -2.0], [-2.0, -2.0], [-3.0, -1.0], [-4.0, -1.0]], [1.0, 1.0, -1.0, -1.0], [0] * 4,
        negatives="basic", score_function="likelihood_ratio",
    )  # fmt: skip
    _aggregated(loss, mask).backward()
    _close(logp.grad, [[-0.25, -0.25], [-0.25, -0.25], [0.25, 0.25], [0.25, 0.25]])


def test_disco_kl_constraint_is_a_squared_hinge_on_the_token_mean_kl():
    # ℓ = logπθ − logπ_old = 0.1 everywhere: k3 = e^{0.1} − 0.1 − 1; c = β(KL − δ) = 1e3 (k3 − 1e-4) > 0
    logp, mask, loss, metrics = _run(
        "disco", [[0.0, 0.0], [0.0, 0.0]], [0.0, 0.0], [0, 0], old=[[-0.1, -0.1], [-0.1, -0.1]]
    )
    k3 = math.exp(0.1) - 0.1 - 1
    coefficient = 1e3 * (k3 - 1e-4)
    _close(metrics["disco/kl"], k3)
    total = _aggregated(loss, mask)
    _close(total, coefficient * k3)  # no contrast (advantages 0): only the penalty
    total.backward()
    _close(logp.grad, [[coefficient * (math.exp(0.1) - 1) / 4] * 2] * 2)  # c · ∂(token-mean KL)/∂logp_t
    _, _, loss, metrics = _run("disco", [[0.0]], [0.0], [0], old=[[-0.001]])  # KL ≈ 5e-7 < δ: inactive
    assert metrics["disco/constraint_active"].item() == 0.0 and loss.abs().max().item() == 0.0


# ------------------------------------------------------------------------------------------------------------ GVPO
def _per_sample_sum(loss, mask):
    return (loss.sum(1) / mask.sum(1)).sum()  # Σ_i L_i


def test_gvpo_regresses_the_centred_implicit_reward_onto_the_centred_reward():
    # β = 0.5: R = 0.5·Σ_t ℓ = (0.2, −0.05); mean 0.075; residual = (0.125 − 0.5, −0.125 + 0.5) = (−0.375, 0.375)
    logp, mask, loss, metrics = _run(
        "gvpo", [[0.2, 0.2], [-0.1, 5.0]], [0.5, -0.5], [7, 7], old=[[0.0, 0.0], [0.0, 0.0]],
        mask=[[1, 1], [1, 0]], beta=0.5,
    )  # fmt: skip
    _close(loss, [[0.0703125] * 2, [0.0703125, 0.0]])  # ½·0.375² / (G − 1)
    _per_sample_sum(loss, mask).backward()
    _close(logp.grad, [[-0.1875] * 2, [0.1875, 0.0]])  # residual · β / (G − 1) per token (group mean detached)
    assert metrics["gvpo/residual_abs"].item() == pytest.approx(0.375)


def test_gvpo_on_policy_is_reinforce_with_the_centred_advantage():
    logp, mask, loss, _ = _run("gvpo", [[-1.0, -2.0], [-0.5, -0.5]], [0.5, -0.5], [0, 0], beta=0.1)
    _per_sample_sum(loss, mask).backward()
    _close(logp.grad, [[-0.05, -0.05], [0.05, 0.05]])  # −β/(G−1)·A_i on every token


# -------------------------------------------------------------------------------------------------------- Reg-GRPO
def test_reg_grpo_residual_shrinks_then_reverses_instead_of_clipping():
    # ℓ̄ = (0.2, −0.1), centred (0.15, −0.15), A = (0.5, −0.5): residual (0.35, −0.35), L = ½·0.35²
    logp, mask, loss, _ = _run(
        "reg_grpo", [[0.2, 0.2], [-0.1, 3.0]], [0.5, -0.5], [0, 0], old=[[0.0, 0.0], [0.0, 0.0]], mask=[[1, 1], [1, 0]]
    )
    _close(loss, [[0.06125] * 2, [0.06125, 0.0]])
    _per_sample_sum(loss, mask).backward()
    # ∂ΣL/∂ℓ̄_0 = −r_0·½ + r_1·½ = −0.35 (spread over 2 tokens), ∂ΣL/∂ℓ̄_1 = +0.35 (1 token): pull towards A
    _close(logp.grad, [[-0.175, -0.175], [0.35, 0.0]])
    # overshoot: ℓ̄ = (2, 0) -> Â = (1, −1) beyond A = (0.5, −0.5): the gradient pushes back (GRPO's clip would zero it)
    logp, mask, loss, _ = _run("reg_grpo", [[2.0], [0.0]], [0.5, -0.5], [0, 0], old=[[0.0], [0.0]])
    _per_sample_sum(loss, mask).backward()
    _close(logp.grad, [[0.5], [-0.5]])


@pytest.mark.parametrize("name", ["conspo", "disco", "gvpo", "reg_grpo"])
def test_group_objectives_need_whole_groups_and_reject_bad_values(name):
    assert OBJECTIVES.meta(name)["whole_groups"]
    key = {"conspo": "temperature", "disco": "tau", "gvpo": "beta", "reg_grpo": "beta"}[name]
    with pytest.raises(ValueError, match=key):
        _run(name, [[-1.0], [-2.0]], [1.0, -1.0], [0, 0], **{key: 0.0})


# ------------------------------------------------------------------------------------------- declared aggregation
@pytest.mark.parametrize(
    ("name", "old", "hp", "published", "token_mean"),
    [
        # s = (−1, −2): J = softplus(s_1 − s_0) = log(1 + e^{−1}); the positive carries 2J on its 3 actions
        ("conspo", None, {"margin_end": 0.0}, math.log(1 + math.exp(-1)), 1.5 * math.log(1 + math.exp(-1))),
        # −J = −(s_0 − τ·log e^{s_1/τ}) = −(s_0 − s_1) = −1; the positive carries −2 on its 3 actions; KL = 0
        ("disco", None, {}, -1.0, -1.5),
        # R = 0.1·(−3, −2), centred (−0.05, 0.05); residual (−1.05, 0.55); L = ½·r² = (0.55125, 0.15125)
        ("gvpo", [[0.0] * 3] * 2, {}, (0.55125 + 0.15125) / 2, (3 * 0.55125 + 0.15125) / 4),
        # ℓ̄ = (−1, −2), centred (0.5, −0.5); residual (0.5, 0); L = (0.125, 0)
        ("reg_grpo", [[0.0] * 3] * 2, {}, 0.0625, 3 * 0.125 / 4),
    ],
)
def test_group_objectives_declare_the_aggregation_that_gives_their_published_per_sample_mean(
    name, old, hp, published, token_mean
):
    # one group, A = (1, −0.5), a 3-action sample and a 1-action sample
    _, mask, loss, _ = _run(
        name, [[-1.0, -1.0, -1.0], [-2.0, 0.0, 0.0]], [1.0, -0.5], [0, 0], old=old, mask=[[1, 1, 1], [1, 0, 0]], **hp
    )
    assert OBJECTIVES.meta(name)["aggregation"] == "seq_mean_token_mean"
    _close(_aggregated(loss, mask), published)  # mean over samples of the published per-sample loss
    # token_mean weighs the 3-action sample 3 times: not the published loss (the config refuses it with these)
    _close(aggregate(loss, mask, "token_mean", loss_normalizer(mask, "token_mean")), token_mean)
