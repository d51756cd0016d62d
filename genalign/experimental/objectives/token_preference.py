"""Token-level DPO with a sequential divergence from the reference: TDPO [48] (sequential forward KL) and Ra-DPO [326]
(a risk-truncated sequential divergence), on pairs formed inside each group by reward, with the per-position KL
estimated from the sampled action (experimental tier: see :func:`sequential_forward_kl` for the reading genalign
chose). They run on every family with a reference, flow models included; on the causal LM the published TDPO, with
the reference's full next-token distribution, is ``tdpo_exact`` (:mod:`genalign.algorithms.objectives.sequential_kl`).

Both write the Bradley-Terry loss of each pair on its samples' actions
(:func:`~genalign.algorithms.objectives.sequential_kl.divergence_corrected_loss`) and declare ``whole_groups`` and
``aggregation="seq_mean_token_mean"``. ``n`` samples, ``P`` pairs, ``T`` actions.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.objectives.base import OBJECTIVES, checked_binding
from genalign.algorithms.objectives.preference import PREFERENCE_META, check_beta
from genalign.algorithms.objectives.preference_pairs import PairSelection, check_pair_options, preference_inputs
from genalign.algorithms.objectives.sequential_kl import check_variant, divergence_corrected_loss
from genalign.algorithms.scores import ScoreOutput


def forward_kl_terms(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Per-action estimates ``[n, T]`` of ``KL(π_ref(·|s_t) ‖ πθ(·|s_t))`` from the sampled action alone (0 on padding).

    With ``r = π_ref(a_t)/πθ(a_t)`` and ``a_t ~ πθ``, ``r·log r − r + 1`` is unbiased and non-negative (``E[r] = 1``);
    its gradient is replaced by the exact gradient of the forward KL, ``∇KL(π_ref‖πθ) = −E_{a~πθ}[r ∇logπθ(a)]``:
    the term is ``sg(r log r − r + 1) − sg(r)·(logπθ − sg(logπθ))`` (value: the estimate; gradient: ``−r ∇logπθ``).
    """
    valid = mask > 0
    log_ratio = torch.where(valid, ref_logp - logp, 0.0)  # [n, T] log r (with grad through logp)
    ratio = log_ratio.detach().exp()  # [n, T] r
    estimate = ratio * log_ratio.detach() - ratio + 1.0  # [n, T] r log r − r + 1 >= 0
    surrogate = -ratio * (logp - logp.detach())  # [n, T] value 0, gradient −r ∇logπθ
    return torch.where(valid, estimate + surrogate, 0.0)


def sequential_forward_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """TDPO's sequential KL ``D_SeqKL(y; π_ref ‖ πθ) = Σ_t KL(π_ref(·|s_t) ‖ πθ(·|s_t))`` ``[n]``.

    Reading chosen: TDPO [48] sums the exact per-position KL over the vocabulary (the reference's logits at every
    position); here each position's KL is the sampled-action estimate of :func:`forward_kl_terms`, which needs only
    the log-probs of the sampled actions and so runs on every family (flow models have no vocabulary). The causal LM
    computes the exact sum as the score feature ``ref_forward_kl`` (objective ``tdpo_exact``)."""
    return forward_kl_terms(logp, ref_logp, mask).sum(1)  # [n]


def sequential_risk(logp: Tensor, ref_logp: Tensor, mask: Tensor, confidence: float) -> Tensor:
    """Ra-DPO's sequential risk ``[n]``: the forward-KL terms of the actions whose log-ratio ``log π_ref/πθ`` lies
    above its ``(1 − confidence)``-quantile within the sample (a CVaR-style truncation: the actions where the policy
    gained most over the reference are dropped), summed.

    Reading chosen: Ra-DPO [326] truncates each position's KL over the vocabulary at the ``(1 − c)``-quantile of
    ``log π_ref − log πθ`` (its code's ``calculate_cvar``); without the reference's vocabulary distribution, genalign
    moves the quantile to the sample's sequence of actions (the nested risk over the sequential decisions) and uses
    the sampled-action estimate of :func:`forward_kl_terms` for each kept term."""
    valid = mask > 0
    log_ratio = torch.where(valid, ref_logp - logp, torch.nan).detach()  # [n, T]
    value_at_risk = torch.nanquantile(log_ratio, 1.0 - confidence, dim=1, keepdim=True)  # [n, 1]
    tail = valid & (log_ratio > value_at_risk)  # [n, T] (NaN compares False)
    return torch.where(tail, forward_kl_terms(logp, ref_logp, mask), 0.0).sum(1)  # [n]


def _check_tdpo(*, beta: float, alpha: float, variant: int, pairs: str, min_gap: float) -> None:
    check_beta(beta, "tdpo", "TDPO uses 0.1")
    check_variant(variant, alpha, "TDPO")
    check_pair_options(pairs, min_gap)


def _check_ra_dpo(*, beta: float, alpha: float, variant: int, confidence: float, pairs: str, min_gap: float) -> None:
    check_beta(beta, "ra_dpo", "Ra-DPO uses 0.1")
    check_variant(variant, alpha, "Ra-DPO")
    if not 0 < confidence <= 1:
        raise ValueError(f"confidence={confidence!r} must be in (0, 1] (the risk measure's level; Ra-DPO uses 0.95).")
    check_pair_options(pairs, min_gap)


@OBJECTIVES.register(
    "tdpo",
    uses_old_logp=False,
    bind=checked_binding("tdpo", _check_tdpo),
    **PREFERENCE_META,
    formula="h_i = Σ_t (logπθ − logπref); δ_i = Σ_t KL̂(πref‖πθ) (sampled-action estimate); "
    "TDPO1: ℓ = −log σ(β[(h_w − h_l) − (δ_l − δ_w)]); TDPO2: ℓ = −log σ(β[(h_w − h_l) − α(δ_l − sg(δ_w))])",
    source="[48] TDPO (Vance0124/Token-level-Direct-Preference-Optimization tdpo_loss); reading chosen: the "
    "per-position forward KL is estimated from the sampled action (any family; the exact form is tdpo_exact)",
    summary="Token-level DPO: the pair's margin is corrected by the difference of the samples' sequential forward "
    "KL to the reference (TDPO2: the chosen one's held constant, weighted by α), on pairs of the group's samples.",
)
def tdpo(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    alpha: float = 0.5,
    variant: Literal[1, 2] = 2,
    pairs: PairSelection = "all",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """TDPO [48]: DPO in the token-level MDP with a forward-KL constraint on each token. With the implicit reward
    ``h = Σ_t (logπθ − logπ_ref)`` and the sequential KL ``δ = Σ_t KL(π_ref(·|s_t) ‖ πθ(·|s_t))`` of each sample,
    TDPO1 is ``−log σ(β · [(h_w − h_l) − (δ_l − δ_w)])`` and TDPO2 (the paper's main form, default)
    ``−log σ(β · [(h_w − h_l) − α(δ_l − sg(δ_w))])``, as in the reference code's ``tdpo_loss``.

    Reading chosen: ``δ`` is estimated from the sampled actions (:func:`sequential_forward_kl`): unbiased on the
    policy's own samples, with the exact gradient of the forward KL, where the published form sums the exact KL over
    the vocabulary at each position. Pairs come from the group's rewards (the published setting uses offline pairs).

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0``; alpha: ``α >= 0`` (variant 2); variant: 1 or 2.
        pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``tdpo/pairs``, ``tdpo/ordered_pairs``, ``tdpo/margin``, ``tdpo/divergence``
        (mean ``δ``).
    """
    _check_tdpo(beta=beta, alpha=alpha, variant=variant, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "tdpo", selection=pairs, min_gap=min_gap)
    divergence = sequential_forward_kl(inputs.logp, inputs.ref_logp, inputs.mask)  # [n] δ
    return divergence_corrected_loss(inputs, divergence, beta=beta, alpha=alpha, variant=variant, prefix="tdpo")


@OBJECTIVES.register(
    "ra_dpo",
    uses_old_logp=False,
    bind=checked_binding("ra_dpo", _check_ra_dpo),
    **PREFERENCE_META,
    formula="h_i = Σ_t (logπθ − logπref); ρ_i = Σ_t 1[log(πref/πθ)_t > q_{1−c}]·KL̂_t; "
    "Ra-DPO1: ℓ = −log σ(β[(h_w − h_l) − (ρ_l − ρ_w)]); Ra-DPO2: ℓ = −log σ(β[(h_w − h_l) − α(ρ_l − sg(ρ_w))])",
    source="[326] Ra-DPO (zlj123-max/Ra-DPO Ra_DPOTrainer.loss); reading chosen: the CVaR truncation runs over the "
    "sample's actions with sampled-action KL estimates, not over the vocabulary",
    summary="Risk-aware token-level DPO: TDPO's sequential KL replaced by a CVaR-style sequential risk that keeps "
    "the actions where the policy lost most probability to the reference, suppressing drift from it.",
)
def ra_dpo(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    alpha: float = 0.5,
    variant: Literal[1, 2] = 1,
    confidence: float = 0.95,
    pairs: PairSelection = "all",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Ra-DPO [326]: the token-level Bradley-Terry form of TDPO with the sequential KL replaced by a sequential risk
    ratio ``ρ`` (a nested risk measure of the deviation from the reference): Ra-DPO1
    ``−log σ(β · [(h_w − h_l) − (ρ_l − ρ_w)])`` (the reference configuration's default) and Ra-DPO2
    ``−log σ(β · [(h_w − h_l) − α(ρ_l − sg(ρ_w))])``, as in the reference code's ``Ra_DPOTrainer.loss``.

    Reading chosen: ``ρ`` is :func:`sequential_risk`: the sampled-action forward-KL terms of the actions whose
    log-ratio ``log π_ref/πθ`` is above the sample's ``(1 − confidence)``-quantile, summed; the reference code
    truncates over the vocabulary at each position, which needs the reference's full distribution.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0``; alpha: ``α >= 0`` (variant 2); variant: 1 or 2; confidence: the risk level ``c`` in (0, 1].
        pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``ra_dpo/pairs``, ``ra_dpo/ordered_pairs``, ``ra_dpo/margin``,
        ``ra_dpo/divergence`` (mean ``ρ``).
    """
    _check_ra_dpo(beta=beta, alpha=alpha, variant=variant, confidence=confidence, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "ra_dpo", selection=pairs, min_gap=min_gap)
    risk = sequential_risk(inputs.logp, inputs.ref_logp, inputs.mask, confidence)  # [n] ρ
    return divergence_corrected_loss(inputs, risk, beta=beta, alpha=alpha, variant=variant, prefix="ra_dpo")


__all__ = ["forward_kl_terms", "ra_dpo", "sequential_forward_kl", "sequential_risk", "tdpo"]
