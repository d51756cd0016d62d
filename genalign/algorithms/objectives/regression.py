"""Objectives that regress the group's advantages with the policy's own implicit advantages: GVPO [139] (the centred
implicit reward ``β·log πθ/π_old`` matched to the centred reward) and Reg-GRPO [177] (the GRPO advantage predicted
by the centred length-normalised log-ratio). No importance ratio is clipped; the squared residual vanishes once the
policy has moved exactly as far as the advantages ask, and reverses sign if it moves further.

Both weigh samples within their group (registry meta ``whole_groups``) and write each sample's loss on its valid
actions (:mod:`~genalign.algorithms.objectives.group_terms`): with ``aggregation: seq_mean_token_mean`` the aggregated
loss is ``mean_i L_i``, the published per-sample mean (registry meta ``aggregation``: the default with them; another
mode, which would weigh samples by their length, is refused at config load). ``n`` samples, ``T`` actions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.objectives.group_terms import (
    batch_inputs,
    group_sum,
    on_actions,
    sample_advantages,
)
from genalign.algorithms.scores import ScoreOutput


def regression_log_ratio(logp: Tensor, batch: StepBatch, mask: Tensor, option: str) -> Tensor:
    """``ℓ = logπθ − logπ_old`` ``[n, T]`` (0 on padding)."""
    old_logp = require(batch, "old_logp", f"objective {option!r}").to(logp.dtype)
    return torch.where(mask > 0, logp - old_logp, 0.0)


@OBJECTIVES.register(
    "gvpo",
    whole_groups=True,
    aggregation="seq_mean_token_mean",
    formula="R_θ,i = β·Σ_t (logπθ − logπ_old); L_i = ½·((R_θ,i − sg(mean_G R_θ)) − A_i)² / (G − 1), "
    "A_i = r_i − mean_G r (advantage: dr_grpo)",
    source="[139] GVPO (verl recipe/gvpo, compute_policy_loss_gvpo); differs: mean of L_i over samples where the "
    "reference sums a micro-batch (a learning-rate factor)",
    summary="Regress the centred implicit reward β·log πθ/π_old onto the centred reward; the gradient weights "
    "embed the KL-constrained optimum, no importance sampling or clipping.",
)
def gvpo(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, beta: float = 0.1
) -> tuple[Tensor, dict[str, Tensor]]:
    """GVPO [139]: with the implicit reward ``R_θ(y) = β · log(πθ(y) / π_old(y))`` (sequence log-probs, summed over
    tokens), minimise ``½ Σ_i ((R_θ,i − mean_G R_θ) − (r_i − mean_G r))² / (G − 1)``. Its gradient is
    ``−β/(G−1) Σ_i [(r_i − r̄) − (R_θ,i − R̄_θ)] ∇logπθ(y_i)``: on-policy (``R_θ = 0``) this is REINFORCE with the
    Dr. GRPO advantage; as the policy moves, each sample's weight shrinks by how far its implicit reward already moved,
    and the unique fixed point is the KL-constrained optimum ``π* ∝ π_old · exp(r / β)``.

    Follows the reference code (verl ``recipe/gvpo/gvpo_core_algos.py``, ``compute_policy_loss_gvpo``; paper
    arXiv 2504.19599): the reference policy of the KL is the old policy, the group mean of ``R_θ`` is a constant
    (detached), ``A_i`` is the sample's advantage (configure ``advantage: dr_grpo``, as the reference's
    ``norm_adv_by_std_in_grpo=False``), ``β = 0.1``. Deliberate difference: the reference *sums* ``L_i`` over a
    micro-batch (then divides by the number of micro-batches); genalign writes ``L_i`` on each action, so
    ``seq_mean_token_mean`` gives ``mean_i L_i`` — a constant factor (the micro-batch size), i.e. a learning-rate
    rescale.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: ``[n]`` or ``[n, T]`` (per-action advantages are averaged per sample, as the reference does).
        batch: ``mask``, ``group_ids``, ``old_logp``.
        beta: ``β > 0``, the KL coefficient of the implicit reward.
    Returns:
        ``(loss [n, T], metrics)`` with ``gvpo/residual_abs`` (mean ``|(R_θ − R̄_θ) − A|``).
    """
    if not beta > 0:
        raise ValueError(f"beta={beta!r} must be > 0 (GVPO's KL coefficient; the reference uses 0.1).")
    logp, mask, groups = batch_inputs(score, batch, "gvpo")
    implicit = beta * (regression_log_ratio(logp, batch, mask, "gvpo") * mask).sum(1)  # [n] R_θ,i
    group_mean = (group_sum(implicit.detach(), groups) / groups.sizes.to(logp.dtype))[groups.index]  # [n]
    residual = (implicit - group_mean) - sample_advantages(advantages, mask)  # [n]
    dof = (groups.sizes.to(logp.dtype) - 1.0).clamp_min(1.0)[groups.index]  # [n] G − 1
    loss = on_actions(0.5 * residual.square() / dof, mask)  # [n, T]
    return loss, {"gvpo/residual_abs": residual.detach().abs().mean()}


__all__ = ["gvpo"]
