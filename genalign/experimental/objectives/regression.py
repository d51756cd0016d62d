"""Reg-GRPO [177], whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.objectives.group_terms import (
    batch_inputs,
    group_sum,
    on_actions,
    sample_advantages,
    sequence_mean,
)
from genalign.algorithms.objectives.regression import regression_log_ratio
from genalign.algorithms.scores import ScoreOutput


@OBJECTIVES.register(
    "reg_grpo",
    whole_groups=True,
    aggregation="seq_mean_token_mean",
    formula="ℓ̄_i = mean_t (logπθ − logπ_old); Â_θ,i = β·(ℓ̄_i − mean_G ℓ̄); L_i = ½·(A_i − Â_θ,i)²",
    source="[177] Reg-GRPO (DeepVideo-R1)",
    summary="GRPO as a regression: the policy's centred length-normalised log-ratio predicts the group advantage; "
    "no clip, no min.",
)
def reg_grpo(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, beta: float = 1.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """Reg-GRPO [177]: GRPO's clipped surrogate is replaced by a regression whose target is the GRPO advantage and
    whose prediction is the policy's own implicit advantage, so there is no clip or min to zero the gradient: the
    residual pulls the policy up to the advantage and pushes it back if it overshoots.

    Reading chosen: the abstract does not give the regressed quantity. genalign predicts the advantage with the
    centred, length-normalised sequence log-ratio to the sampling policy, ``Â_θ,i = β·(ℓ̄_i − mean_G ℓ̄)``,
    ``ℓ̄_i = mean_t (logπθ − logπ_old)``, and minimises ``½ (A_i − Â_θ,i)²`` (group mean with gradient). On-policy the
    gradient is ``−β Σ_i A_i ∇ℓ̄_i``, GRPO's sequence-mean gradient scaled by ``β``; ``β`` sets how far the policy
    moves before the residual vanishes (``β = 1``: when the mean token log-ratio, centred in its group, equals
    the advantage).

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: ``[n]`` or ``[n, T]`` (averaged per sample).
        batch: ``mask``, ``group_ids``, ``old_logp``.
        beta: ``β > 0``, scale of the predicted advantage.
    Returns:
        ``(loss [n, T], metrics)`` with ``reg_grpo/residual_abs``.
    """
    if not beta > 0:
        raise ValueError(f"beta={beta!r} must be > 0 (scale of the predicted advantage, e.g. 1.0).")
    logp, mask, groups = batch_inputs(score, batch, "reg_grpo")
    mean_log_ratio = sequence_mean(regression_log_ratio(logp, batch, mask, "reg_grpo"), mask)  # [n] ℓ̄_i
    group_mean = (group_sum(mean_log_ratio, groups) / groups.sizes.to(logp.dtype))[groups.index]  # [n]
    residual = sample_advantages(advantages, mask) - beta * (mean_log_ratio - group_mean)  # [n]
    loss = on_actions(0.5 * residual.square(), mask)  # [n, T]
    return loss, {"reg_grpo/residual_abs": residual.detach().abs().mean()}
