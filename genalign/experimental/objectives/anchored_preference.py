"""DPO variants that change how the reference anchors the pair's margin, on pairs formed inside each group by reward
(experimental tier: the abstracts give the idea, not the loss): CPO [39] (the target margin never negative) and
CITA [12] (a contrastive preference term with SFT on the chosen sample and a quadratic anchor to the reference).

Both write each pair's loss on its samples' actions (:mod:`~genalign.algorithms.objectives.preference_pairs`) and
declare ``whole_groups`` and ``aggregation="seq_mean_token_mean"``. ``n`` samples, ``P`` pairs, ``T`` actions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.objectives.base import OBJECTIVES, checked_binding
from genalign.algorithms.objectives.group_terms import sequence_mean
from genalign.algorithms.objectives.preference import PREFERENCE_META, check_beta
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


def _check_constrained_dpo(*, beta: float, margin_floor: float, pairs: str, min_gap: float) -> None:
    check_beta(beta, "constrained_dpo", "DPO uses 0.1")
    if not margin_floor >= 0:
        raise ValueError(f"margin_floor={margin_floor!r} must be >= 0 (the least target margin, in nats; e.g. 0.0).")
    check_pair_options(pairs, min_gap)


@OBJECTIVES.register(
    "constrained_dpo",
    uses_old_logp=False,
    bind=checked_binding("constrained_dpo", _check_constrained_dpo),
    **PREFERENCE_META,
    formula="Δθ = logπθ(y_w) − logπθ(y_l), Δref = logπref(y_w) − logπref(y_l) (summed); "
    "ℓ_p = −log σ(β(Δθ − max(Δref, m₀))); L = mean_q mean_{p∈q} ℓ_p",
    source="[39] CPO (constrained preference optimization); reading chosen: DPO's margin target floored at m₀ >= 0",
    summary="DPO as margin ranking whose target is never negative: the policy must prefer the chosen sample "
    "outright, not only more than the reference does.",
)
def constrained_dpo(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    margin_floor: float = 0.0,
    pairs: PairSelection = "all",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CPO [39]: DPO's loss is a soft margin ranking ``−log σ(β(Δθ − Δref))`` whose target margin, the reference's
    preference ``Δref``, can be negative; DPO then accepts a policy that still prefers the rejected response
    (``Δθ < 0``) as long as it prefers it less than the reference did. CPO constrains the optimum to prefer the
    human-preferred response.

    Reading chosen: the abstract gives the constraint, not the loss. genalign floors the target margin,
    ``−log σ(β(Δθ − max(Δref, m₀)))`` with ``m₀ = margin_floor >= 0``: identical to DPO on pairs the reference
    already ranks right (``Δref >= m₀``), and a reference-free margin ranking with target ``m₀`` on the others, so
    the loss falls below ``log 2`` only when ``Δθ > m₀ >= 0``.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0``; margin_floor: ``m₀ >= 0`` (nats of the summed log-probs).
        pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``cpo/pairs``, ``cpo/ordered_pairs``, ``cpo/margin`` and
        ``cpo/floored_targets`` (the fraction of pairs whose reference margin was raised to ``m₀``).
    """
    _check_constrained_dpo(beta=beta, margin_floor=margin_floor, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "constrained_dpo", selection=pairs, min_gap=min_gap)
    found, mask = inputs.pairs, inputs.mask
    policy_logp = sequence_sum(inputs.logp, mask)  # [n]
    reference_logp = sequence_sum(inputs.ref_logp, mask)  # [n]
    target = reference_logp[found.chosen] - reference_logp[found.rejected]  # [P] Δref
    logits = beta * (policy_logp[found.chosen] - policy_logp[found.rejected] - target.clamp_min(margin_floor))  # [P]
    loss = pairs_on_actions(bradley_terry_loss(logits), found, mask)  # [n, T]
    metrics = pair_metrics("cpo", logits, found)
    metrics["cpo/floored_targets"] = (target < margin_floor).float().mean() if found.num_pairs else logits.new_zeros(())
    return loss, metrics


def sequence_sum(values: Tensor, mask: Tensor) -> Tensor:
    """``Σ_t m_it v_it`` ``[n]``; padding may hold anything."""
    return values.masked_fill(mask <= 0, 0.0).sum(1)  # [n]


def _check_cita(*, beta: float, sft_coef: float, anchor_coef: float, pairs: str, min_gap: float) -> None:
    check_beta(beta, "cita", "DPO uses 0.1")
    if not (sft_coef >= 0 and anchor_coef >= 0):
        raise ValueError(f"sft_coef={sft_coef!r} and anchor_coef={anchor_coef!r} must be >= 0 (e.g. 0.1 each).")
    check_pair_options(pairs, min_gap)


@OBJECTIVES.register(
    "cita",
    uses_old_logp=False,
    bind=checked_binding("cita", _check_cita),
    **PREFERENCE_META,
    formula="h_i = Σ_t (logπθ − logπref); ℓ_p = −log σ(β(h_w − h_l)) + λ_sft·(−mean_t logπθ(y_w)) + "
    "λ_anc·½·[mean_t (logπθ − logπref)²(y_w) + (same)(y_l)]",
    source="[12] ECLIPTICA / CITA; reading chosen: DPO + SFT on the chosen sample + a quadratic log-ratio anchor",
    summary="Contrastive preference optimization combined with SFT on the chosen sample and an explicit anchor to "
    "the reference (squared per-action log-ratio), so updates stay in a neighbourhood of the reference.",
)
def cita(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 0.1,
    sft_coef: float = 0.1,
    anchor_coef: float = 0.1,
    pairs: PairSelection = "best_worst",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CITA [12]: SFT combined with contrastive preference optimization under an explicit geometric anchor to the
    reference model, which keeps the policies trained for different alignment instructions (written in the prompt)
    in one neighbourhood of the reference.

    Reading chosen: the abstract names the three parts, not their form. genalign takes, per pair, DPO's loss
    ``−log σ(β(h_w − h_l))``, the length-normalised negative log-likelihood of the chosen sample weighted by
    ``sft_coef`` and the anchor ``½ mean_t (logπθ − logπref)²`` (the k2 estimate of the KL, a local quadratic
    metric around the reference) of both samples weighted by ``anchor_coef``. The instruction conditioning is the
    data's: put the alignment instruction in the prompt.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0``; sft_coef, anchor_coef: ``>= 0``.
        pairs: ``"best_worst"`` (one chosen sample per group for the SFT term) or ``"all"``; min_gap: the reward gap
            a pair needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``cita/pairs``, ``cita/ordered_pairs``, ``cita/margin`` and ``cita/anchor``.
    """
    _check_cita(beta=beta, sft_coef=sft_coef, anchor_coef=anchor_coef, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "cita", selection=pairs, min_gap=min_gap)
    found, logp, mask = inputs.pairs, inputs.logp, inputs.mask
    implicit = summed_log_ratio(logp, inputs.ref_logp, mask)  # [n] h_i
    logits = beta * (implicit[found.chosen] - implicit[found.rejected])  # [P]
    sft = -sequence_mean(logp, mask)  # [n] length-normalised NLL
    log_ratio = torch.where(mask > 0, logp - inputs.ref_logp, 0.0)  # [n, T] (padding masked before squaring)
    anchor = 0.5 * sequence_mean(log_ratio.square(), mask)  # [n]
    pair_losses = bradley_terry_loss(logits) + sft_coef * sft[found.chosen]  # [P]
    pair_losses = pair_losses + anchor_coef * (anchor[found.chosen] + anchor[found.rejected])  # [P]
    loss = pairs_on_actions(pair_losses, found, mask)  # [n, T]
    metrics = pair_metrics("cita", logits, found)
    metrics["cita/anchor"] = anchor.detach().mean()
    return loss, metrics


__all__ = ["cita", "constrained_dpo", "sequence_sum"]
