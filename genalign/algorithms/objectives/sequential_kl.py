"""TDPO [48] in its published form: token-level DPO whose pair margin is corrected by the samples' sequential forward
KL to the reference, the exact per-token KL over the vocabulary (score feature ``ref_forward_kl``, computed by the
causal LM in its chunked head pass from the reference's hidden states, never an ``[n, T, V]`` tensor), on pairs formed
inside each group by reward.

The Bradley-Terry form with a divergence correction, :func:`divergence_corrected_loss`, is shared with the
sampled-action readings of TDPO and Ra-DPO (``genalign.experimental.objectives.token_preference``). Pairs and their
placement come from :mod:`~genalign.algorithms.objectives.preference_pairs` (``whole_groups``,
``aggregation="seq_mean_token_mean"``). ``n`` samples, ``P`` pairs, ``T`` actions.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.objectives.base import OBJECTIVES, checked_binding
from genalign.algorithms.objectives.preference import PREFERENCE_META, check_beta
from genalign.algorithms.objectives.preference_pairs import (
    PairSelection,
    PreferenceInputs,
    bradley_terry_loss,
    check_pair_options,
    pair_metrics,
    pairs_on_actions,
    preference_inputs,
    summed_log_ratio,
)
from genalign.algorithms.scores import ScoreOutput
from genalign.algorithms.signals import declare_signal

declare_signal("ref_forward_kl", ("N", "T"), "score",
               "KL(π_ref(·|s_t) ‖ πθ(·|s_t)) of each action's state over the whole vocabulary, with gradient, from the "
               "reference's hidden states and head compared chunk by chunk in the policy's head pass.",
               source="[48] TDPO", detached=False,
               param="set by the family: the reference's (hidden [n, T, H], head)")  # fmt: skip


def divergence_corrected_loss(
    inputs: PreferenceInputs, divergence: Tensor, *, beta: float, alpha: float, variant: int, prefix: str
) -> tuple[Tensor, dict[str, Tensor]]:
    """``−log σ(β·[(h_w − h_l) − (δ_l − δ_w)])`` (variant 1) or ``−log σ(β·[(h_w − h_l) − α(δ_l − sg(δ_w))])``
    (variant 2) of each pair, placed on its samples ``[n, T]``; ``divergence`` ``[n]`` is each sample's sequential
    divergence ``δ`` (with gradient), ``h`` the summed log-ratio to the reference."""
    found = inputs.pairs
    implicit = summed_log_ratio(inputs.logp, inputs.ref_logp, inputs.mask)  # [n] h_i
    margin = implicit[found.chosen] - implicit[found.rejected]  # [P]
    chosen_divergence, rejected_divergence = divergence[found.chosen], divergence[found.rejected]  # [P]
    if variant == 1:
        logits = beta * (margin - (rejected_divergence - chosen_divergence))  # [P]
    else:
        logits = beta * (margin - alpha * (rejected_divergence - chosen_divergence.detach()))  # [P]
    loss = pairs_on_actions(bradley_terry_loss(logits), found, inputs.mask)  # [n, T]
    metrics = pair_metrics(prefix, logits, found)
    metrics[f"{prefix}/divergence"] = divergence.detach().mean()
    return loss, metrics


def check_variant(variant: int, alpha: float, option: str) -> None:
    """Raise a ``ValueError`` unless ``variant`` is 1 or 2 and ``alpha >= 0``."""
    if variant not in (1, 2):
        raise ValueError(f"variant={variant!r} must be 1 or 2 ({option}1 or {option}2 of the paper).")
    if not alpha >= 0:
        raise ValueError(f"alpha={alpha!r} must be >= 0 (the weight of the divergence in variant 2, e.g. 0.5).")


def _check_tdpo_exact(*, beta: float, alpha: float, variant: int, pairs: str, min_gap: float) -> None:
    check_beta(beta, "tdpo_exact", "TDPO uses 0.1")
    check_variant(variant, alpha, "TDPO")
    check_pair_options(pairs, min_gap)


@OBJECTIVES.register(
    "tdpo_exact",
    uses_old_logp=False,
    bind=checked_binding("tdpo_exact", _check_tdpo_exact),
    **{**PREFERENCE_META, "needs": (*PREFERENCE_META["needs"], "ref_forward_kl")},
    formula="h_i = Σ_t (logπθ − logπref); δ_i = Σ_t Σ_v πref(v|s_t) log(πref(v|s_t)/πθ(v|s_t)) (exact, chunked); "
    "TDPO1: ℓ = −log σ(β[(h_w − h_l) − (δ_l − δ_w)]); TDPO2: ℓ = −log σ(β[(h_w − h_l) − α(δ_l − sg(δ_w))])",
    source="[48] TDPO (Vance0124/Token-level-Direct-Preference-Optimization tdpo_loss, the per-position KL summed "
    "over the vocabulary); pairs formed inside each group by reward",
    summary="Token-level DPO with the exact sequential forward KL to the reference (the reference's full next-token "
    "distribution at every position, compared chunk by chunk in the head pass), on pairs of the group's samples.",
)
def tdpo_exact(
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
    """TDPO [48] as published: with ``h = Σ_t (logπθ − logπ_ref)`` and the sequential KL
    ``δ = Σ_t KL(π_ref(·|s_t) ‖ πθ(·|s_t))`` summed over the vocabulary at every position of the sample, TDPO1 is
    ``−log σ(β · [(h_w − h_l) − (δ_l − δ_w)])`` and TDPO2 (default) ``−log σ(β · [(h_w − h_l) − α(δ_l − sg(δ_w))])``
    (the reference code's ``tdpo_loss``). The per-position KL is the score feature ``ref_forward_kl`` (the causal LM
    computes it from the reference's hidden states in its chunked head pass); the sampled-action estimate of the same
    loss is the experimental ``tdpo``.

    Args:
        score: ``logp`` ``[n, T]`` (with grad) and ``ref_forward_kl`` ``[n, T]`` (with grad).
        advantages: unused (the pairs come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``ref_logp`` ``[n, T]``.
        beta: ``β > 0``; alpha: ``α >= 0`` (variant 2); variant: 1 or 2.
        pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``tdpo/pairs``, ``tdpo/ordered_pairs``, ``tdpo/margin``, ``tdpo/divergence``
        (mean ``δ``).
    """
    _check_tdpo_exact(beta=beta, alpha=alpha, variant=variant, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "tdpo_exact", selection=pairs, min_gap=min_gap)
    per_token = score.require("ref_forward_kl", "tdpo_exact").float()  # [n, T]
    divergence = torch.where(inputs.mask > 0, per_token, 0.0).sum(1)  # [n] δ
    return divergence_corrected_loss(inputs, divergence, beta=beta, alpha=alpha, variant=variant, prefix="tdpo")


__all__ = ["check_variant", "divergence_corrected_loss", "tdpo_exact"]
