"""Preference objectives on pairs formed inside each group by reward, in their published forms: DPO's loss [187] with
on-policy pairs (rDPO's construction [285]), MIPO [140] (per-pair reference intervention) and TRPA [178] (preference
levels, anisotropic pairs, a trust region to the old policy).

Pairs, their placement on the actions and the aggregation they need come from
:mod:`~genalign.algorithms.objectives.preference_pairs`: each objective declares ``whole_groups`` and
``aggregation="seq_mean_token_mean"`` (the aggregated loss is the mean over groups of each group's mean pair loss).
They read the reference policy's log-probs ``ref_logp`` (a score feature of every family with a reference: token
families unless ``policy.reference: none``, flow models with LoRA, whose per-step SDE log-probs make these the
Diffusion-DPO-style objectives) and the step's ``combined_reward``; the advantages are not used (the pairs carry the
preference). ``n`` samples, ``P`` pairs, ``T`` actions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.kl import kl_k3
from genalign.algorithms.objectives.base import OBJECTIVES, checked_binding
from genalign.algorithms.objectives.group_terms import batch_token_mean_on_actions, sequence_mean
from genalign.algorithms.objectives.preference_pairs import (
    PairSelection,
    bradley_terry_loss,
    check_pair_options,
    pair_metrics,
    pairs_on_actions,
    preference_inputs,
    summed_log_ratio,
)
from genalign.algorithms.scores import ScoreOutput

#: registry meta shared by the preference objectives
PREFERENCE_META = {"needs": ("ref_logp", "combined_reward"), "whole_groups": True, "aggregation": "seq_mean_token_mean"}


def check_beta(beta: float, option: str, typical: str) -> None:
    """Raise a ``ValueError`` naming ``option`` unless its inverse temperature ``beta`` is > 0."""
    if not beta > 0:
        raise ValueError(f"beta={beta!r} must be > 0 (the inverse temperature of objective {option!r}; {typical}).")


def _check_group_dpo(*, beta: float, pairs: str, min_gap: float) -> None:
    check_beta(beta, "group_dpo", "DPO uses 0.1")
    check_pair_options(pairs, min_gap)


def _check_mipo(*, beta: float, pairs: str, min_gap: float) -> None:
    check_beta(beta, "mipo", "the MIPO authors use 5 to 25")
    check_pair_options(pairs, min_gap)


def _check_trpa(*, beta: float, anisotropy: float, top_reward: float, trust_region_coef: float, min_gap: float) -> None:
    check_beta(beta, "trpa", "the TRPA runs use 0.1")
    check_pair_options("all", min_gap)
    if not (anisotropy >= 1 and trust_region_coef >= 0):
        raise ValueError(
            f"trpa needs anisotropy >= 1 and trust_region_coef >= 0, got anisotropy={anisotropy!r}, "
            f"trust_region_coef={trust_region_coef!r} (the reference run uses 2.5 and 1e-3)."
        )


@OBJECTIVES.register(
    "group_dpo",
    uses_old_logp=False,
    bind=checked_binding("group_dpo", _check_group_dpo),
    **PREFERENCE_META,
    formula="h_i = Σ_t (logπθ − logπref); pairs (w, l) of a group with r_w − r_l > min_gap (all, or best vs worst); "
    "ℓ_p = −log σ(β(h_w − h_l)); L = mean_q mean_{p∈q} ℓ_p",
    source="[187] DPO's loss (re-derived as token-level inverse Q-learning), on-policy pairs from each group as in "
    "[285] rDPO's on-policy construction (the rubric is the reward)",
    summary="DPO on pairs of the group's own samples ranked by reward, against the reference policy; on flow models "
    "the per-step SDE log-probs make it Diffusion-DPO-style.",
)
def group_dpo(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    pairs: PairSelection = "all",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DPO's loss on pairs formed inside each group: for a pair ``(w, l)`` with ``r_w − r_l > min_gap``,
    ``ℓ = −log σ(β · [(logπθ(y_w) − logπref(y_w)) − (logπθ(y_l) − logπref(y_l))])``, sequence log-probs summed over
    the valid actions. [187] re-derives this loss in the token-level MDP (inverse Q-learning: the per-token
    ``β · log πθ/πref`` is an implicit reward with credit assignment), so the summed form is the published one for
    every action axis: tokens, or the trained SDE steps of a flow model (Diffusion-DPO-style per-step log-probs).
    ``pairs="best_worst"`` keeps one pair per group (the best against the worst), the on-policy construction of
    rDPO [285] with ``min_gap`` as its score filter.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0`` (DPO's 0.1 for language models; flow per-step log-probs averaged over latent elements need
            thousands).
        pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair needs (>= 0).
    Returns:
        ``(loss [n, T], metrics)`` with ``dpo/pairs``, ``dpo/ordered_pairs`` (per group) and ``dpo/margin``.
    """
    _check_group_dpo(beta=beta, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "group_dpo", selection=pairs, min_gap=min_gap)
    found = inputs.pairs
    implicit = summed_log_ratio(inputs.logp, inputs.ref_logp, inputs.mask)  # [n] h_i
    logits = beta * (implicit[found.chosen] - implicit[found.rejected])  # [P]
    loss = pairs_on_actions(bradley_terry_loss(logits), found, inputs.mask)  # [n, T]
    return loss, pair_metrics("dpo", logits, found)


@OBJECTIVES.register(
    "mipo",
    uses_old_logp=False,
    bind=checked_binding("mipo", _check_mipo),
    **PREFERENCE_META,
    formula="s_i = mean_t logπθ, s^ref_i = mean_t logπref; K = s^ref_w − s^ref_l; "
    "ℓ_p = −log σ(β(s_w − s_l − log(1 + e^K))); L = mean_q mean_{p∈q} ℓ_p",
    source="[140] MIPO (reference code mipo_loss: average log-probs, log(1 + exp(K)))",
    summary="Modulated intervention: the reference's own preference K sets each pair's target margin softplus(K): "
    "strong reference intervention on pairs the reference already ranks right, almost none on pairs it gets wrong.",
)
def mipo(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 10.0,
    pairs: PairSelection = "all",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """MIPO [140]: how well a pair is aligned with the reference is ``K = s^ref_w − s^ref_l`` (the reference's
    average log-probs); the loss ``−log σ(β · (s_w − s_l − log(1 + e^K)))`` on the policy's average log-probs asks the
    policy to beat the margin ``softplus(K)``: close to ``K`` (DPO-like, a strong intervention that keeps the policy
    near the reference) when the reference already prefers ``y_w``, close to 0 (reference-free, free to move) when
    it does not. The form is the reference code's ``mipo_loss`` (average log-probs of the chosen and rejected
    responses); the authors report good results for ``β`` between 5 and 25.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0``.
        pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair needs (>= 0).
    Returns:
        ``(loss [n, T], metrics)`` with ``mipo/pairs``, ``mipo/ordered_pairs``, ``mipo/margin`` and
        ``mipo/reference_margin`` (mean ``softplus(K)``).
    """
    _check_mipo(beta=beta, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "mipo", selection=pairs, min_gap=min_gap)
    found = inputs.pairs
    policy_scores = sequence_mean(inputs.logp, inputs.mask)  # [n] s_i
    reference_scores = sequence_mean(inputs.ref_logp, inputs.mask)  # [n] s^ref_i
    target = F.softplus(reference_scores[found.chosen] - reference_scores[found.rejected])  # [P] log(1 + e^K)
    logits = beta * (policy_scores[found.chosen] - policy_scores[found.rejected] - target)  # [P]
    loss = pairs_on_actions(bradley_terry_loss(logits), found, inputs.mask)  # [n, T]
    metrics = pair_metrics("mipo", logits, found)
    metrics["mipo/reference_margin"] = target.detach().mean() if found.num_pairs else torch.tensor(0.0)
    return loss, metrics


@OBJECTIVES.register(
    "trpa",
    bind=checked_binding("trpa", _check_trpa),
    **PREFERENCE_META,
    formula="λ_i = mean_t logπθ − mean_t logπref; pairs across reward levels of a group; "
    "ℓ_p = −log σ(a_p·β(λ_w − λ_l)), a_p = anisotropy if r_w >= top_reward else 1; "
    "L = mean_q mean_{p∈q} ℓ_p + c·mean_tokens min(k3(π_old‖πθ), 10)",
    source="[178] TRPA (XueruiSu/Trust-Region-Preference-Approximation compute_pairwise_policy_loss + trust-region "
    "KL); differs: mean over each group's pairs, then over groups, where the reference averages all pairs of a "
    "micro-batch; a group without pairs contributes 0 (the reference falls back to a per-sample term)",
    summary="Preference levels from rule rewards form all cross-level pairs of a group; a Bradley-Terry loss on the "
    "length-normalised log-ratio to the reference, pairs won by the top level weighted by the anisotropy, and a KL "
    "trust region to the sampling policy.",
)
def trpa(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    anisotropy: float = 2.5,
    top_reward: float = 1.0,
    trust_region_coef: float = 1e-3,
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """TRPA [178]: rule-based rewards define preference levels; every pair of a group's samples at different levels
    is a preference pair ``(w, l)``, scored with the length-normalised log-ratio to the reference
    ``λ_i = mean_t logπθ − mean_t logπref`` and the Bradley-Terry loss ``−log σ(a·β(λ_w − λ_l))``, where ``a`` is
    the anisotropy for pairs whose winner is at the top level (``r_w >= top_reward``) and 1 otherwise. The update
    stays in a trust region around the sampling policy: ``c · KL(π_old ‖ πθ)``, the token mean (over the
    micro-batch) of the ``k3`` estimate clamped at 10 (verl's ``low_var_kl``). Defaults are the reference run's
    (``main_TRPA.sh``: β = 0.1, anisotropy 2.5, trust-region coefficient 1e-3).

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` and ``old_logp`` ``[n, T]``.
        beta: ``β > 0``; anisotropy: ``a >= 1`` for pairs won by the top level; top_reward: the reward of the top
            preference level (1.0 for a correct answer with a 0/1 reward).
        trust_region_coef: ``c >= 0`` of the KL to the sampling policy; min_gap: the reward gap a pair needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``trpa/pairs``, ``trpa/ordered_pairs``, ``trpa/margin`` and
        ``trpa/trust_region_kl``.
    """
    _check_trpa(
        beta=beta, anisotropy=anisotropy, top_reward=top_reward, trust_region_coef=trust_region_coef, min_gap=min_gap
    )
    inputs = preference_inputs(score, batch, "trpa", selection="all", min_gap=min_gap)
    found, logp, mask = inputs.pairs, inputs.logp, inputs.mask
    log_ratio = sequence_mean(logp, mask) - sequence_mean(inputs.ref_logp, mask)  # [n] λ_i
    weight = torch.where(found.chosen_reward >= top_reward, anisotropy, 1.0).to(logp.dtype)  # [P] a_p
    logits = weight * beta * (log_ratio[found.chosen] - log_ratio[found.rejected])  # [P]
    loss = pairs_on_actions(bradley_terry_loss(logits), found, mask)  # [n, T]
    old_logp = require(batch, "old_logp", "objective 'trpa'").to(logp.dtype)
    valid = mask > 0
    trust = torch.where(valid, kl_k3(torch.where(valid, logp, old_logp), old_logp).clamp(max=10.0), 0.0)  # [n, T]
    loss = loss + trust_region_coef * batch_token_mean_on_actions(trust, mask)  # [n, T]
    metrics = pair_metrics("trpa", logits, found)
    metrics["trpa/trust_region_kl"] = trust.detach().sum() / mask.sum().clamp_min(1.0)
    return loss, metrics


__all__ = ["PREFERENCE_META", "check_beta", "group_dpo", "mipo", "trpa"]
