"""Discriminative objectives over the group's positive and negative samples: ConSPO [74] (group InfoNCE on
length-normalised sequence log-probs with a scheduled margin) and DisCO [289] (discriminative score gap with a
squared-hinge KL constraint). Registered in :data:`~genalign.algorithms.objectives.base.OBJECTIVES`.

Positives and negatives are the samples with ``A > 0`` and ``A < 0`` (for 0/1 rewards and any group-mean baseline:
exactly the correct and incorrect samples of a mixed group); a group with no positive or no negative has no contrast
and contributes 0. A group's loss ``J_q`` is spread over its samples so that ``aggregation: seq_mean_token_mean`` gives
``mean over groups of J_q`` exactly (:mod:`~genalign.algorithms.objectives.group_terms`; groups of equal size), the
published form: both declare it (registry meta ``aggregation``: the default with them; another mode, which would weigh
samples by their length, is refused at config load). Both objectives weigh samples within their group (registry meta
``whole_groups``: every micro-batch holds whole groups). ``n`` samples, ``T`` actions.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.kl import kl_k3
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.objectives.group_terms import (
    batch_inputs,
    batch_token_mean_on_actions,
    group_count,
    group_logsumexp,
    on_actions,
    sample_advantages,
    sequence_mean,
)
from genalign.algorithms.scores import ScoreOutput


def _disco_scores(logp: Tensor, old_logp: Tensor, mask: Tensor, score_function: str) -> Tensor:
    """``s_i`` ``[n]``: mean token log-prob (``log_likelihood``) or mean token ratio (``likelihood_ratio``)."""
    if score_function == "log_likelihood":
        return sequence_mean(logp, mask)
    if score_function == "likelihood_ratio":
        return sequence_mean(torch.where(mask > 0, logp - old_logp, 0.0).exp(), mask)
    raise ValueError(f"score_function must be 'log_likelihood' or 'likelihood_ratio', got {score_function!r}")


def _kl_constraint(logp: Tensor, old_logp: Tensor, mask: Tensor, *, delta: float, beta: float) -> tuple[Tensor, Tensor]:
    """DisCO's squared-hinge penalty ``sg(max(β(KL − δ), 0)) · KL`` with ``KL`` the token mean of
    ``k3(π_old ‖ πθ) = e^ℓ − ℓ − 1`` over the micro-batch, written per action as ``c · k3_t · n|o_i| / Σ|o|`` so that
    ``seq_mean_token_mean`` aggregation returns ``c · KL``. Returns ``(per-action penalty [n, T], KL [])``."""
    valid = mask > 0
    per_token = torch.where(valid, kl_k3(old_logp, torch.where(valid, logp, old_logp)), 0.0)  # [n, T] e^ℓ − ℓ − 1
    mean_kl = per_token.sum() / mask.sum().clamp_min(1.0)  # []
    coefficient = (beta * (mean_kl.detach() - delta)).clamp_min(0.0)  # [] the hinge's active slope
    return coefficient * batch_token_mean_on_actions(per_token, mask), mean_kl.detach()


@OBJECTIVES.register(
    "disco",
    whole_groups=True,
    aggregation="seq_mean_token_mean",
    formula="s_i = mean_t logπθ (log_likelihood) or mean_t ρ_it (likelihood_ratio); J_q = mean_{P_q} s − "
    "τ·log Σ_{N_q} e^{s/τ} (dro) or mean_{P_q} s − mean_{N_q} s (basic); L = −mean_q J_q + "
    "sg(max(β(KL − δ), 0))·KL, KL = token mean of k3(π_old‖πθ)",
    source="[289] DisCO (Optimization-AI/DisCO compute_policy_loss_disco_logL; verl recipe/disco); differs: KL "
    "hinge over the micro-batch, not the gathered batch; loss value offset by a constant (same gradient)",
    summary="Discriminative objective: raise the scores of positive answers, lower those of negatives (log-sum-exp "
    "over negatives), no clipping; the KL to the old policy is held under δ by a squared hinge.",
)
def disco(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    score_function: Literal["log_likelihood", "likelihood_ratio"] = "log_likelihood",
    negatives: Literal["dro", "basic"] = "dro",
    tau: float = 10.0,
    delta: float = 1e-4,
    beta: float = 1e3,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DisCO [289]: for each group with positives ``P`` and negatives ``N``,
    ``J = mean_{i∈P} s_i − τ · log Σ_{j∈N} exp(s_j / τ)`` (``negatives="dro"``, DisCO; ``"basic"`` is DisCO-b,
    ``mean_P s − mean_N s``), maximised without clipping; the loss is ``−mean_q J_q`` (groups without contrast count
    as 0, as in the reference code) plus the constraint ``KL(π_old ‖ πθ) <= δ`` enforced by the squared hinge
    ``β/2 · max(KL − δ, 0)²``, implemented as ``sg(max(β(KL − δ), 0)) · KL`` (its gradient).

    The form and defaults (``log_likelihood`` with ``τ = 10``; ``τ = 1`` is recommended for ``likelihood_ratio``;
    ``δ = 1e-4``, ``β = 1e3``) are those of the reference code (Optimization-AI/DisCO ``core_algos.py``,
    ``compute_policy_loss_disco_logL``; verl ``docs/algo/disco.md``). Deliberate differences: the reference writes the
    negatives' term as ``S / sg(S)`` (value 1, same gradient as ``log S``), genalign as ``log S``, so the loss *value*
    differs by a constant; the reference computes the KL over the whole (gathered) batch, genalign over the micro-batch
    (identical with one micro-batch per optimisation batch).

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: ``[n]`` or ``[n, T]`` (their sign marks positives and negatives).
        batch: ``mask``, ``group_ids``, ``old_logp``.
        score_function: ``"log_likelihood"`` (mean token log-prob) or ``"likelihood_ratio"`` (mean token ratio).
        negatives: ``"dro"`` (log-sum-exp over negatives, DisCO) or ``"basic"`` (their mean, DisCO-b).
        tau: temperature ``τ > 0`` of the log-sum-exp.
        delta: KL budget ``δ >= 0``.
        beta: penalty weight ``β >= 0`` of the squared hinge.
    Returns:
        ``(loss [n, T], metrics)`` with ``disco/kl``, ``disco/constraint_active``, ``disco/groups_contrasted``.
    """
    if negatives not in ("dro", "basic"):
        raise ValueError(f"negatives must be 'dro' (DisCO) or 'basic' (DisCO-b), got {negatives!r}")
    if not (tau > 0 and delta >= 0 and beta >= 0):
        raise ValueError(f"need tau > 0, delta >= 0 and beta >= 0, got tau={tau!r}, delta={delta!r}, beta={beta!r}")
    logp, mask, groups = batch_inputs(score, batch, "disco")
    old_logp = require(batch, "old_logp", "objective 'disco'").to(logp.dtype)
    adv = sample_advantages(advantages, mask)  # [n]
    positive, negative = adv > 0, adv < 0  # [n]
    positives, negatives_count = group_count(positive, groups), group_count(negative, groups)  # [G]
    contrasted = (positives > 0) & (negatives_count > 0)  # [G]
    scores = _disco_scores(logp, old_logp, mask, score_function)  # [n]
    size = groups.sizes.to(logp.dtype)  # [G]
    on_positive = torch.where(contrasted, size / positives.clamp_min(1.0), 0.0)[groups.index]  # [n]
    if negatives == "dro":
        lse = group_logsumexp(scores / tau, negative, groups)  # [G]
        negative_term = torch.where(contrasted, tau * lse, 0.0)[groups.index]  # [n]
        per_sample = torch.where(positive, on_positive * (negative_term - scores), 0.0)  # [n]
    else:
        on_negative = torch.where(contrasted, size / negatives_count.clamp_min(1.0), 0.0)[groups.index]  # [n]
        per_sample = torch.where(positive, -on_positive * scores, torch.where(negative, on_negative * scores, 0.0))
    penalty, mean_kl = _kl_constraint(logp, old_logp, mask, delta=delta, beta=beta)  # [n, T], []
    loss = on_actions(per_sample, mask) + penalty  # [n, T]
    metrics = {
        "disco/kl": mean_kl,
        "disco/constraint_active": (mean_kl > delta).float(),
        "disco/groups_contrasted": contrasted.float().mean().detach(),
    }
    return loss, metrics


__all__ = ["disco"]
