"""Pairwise Proximal Policy Optimization, P3O [97], on pairs formed inside each group by reward (experimental tier:
the abstract gives the trajectory-wise pairwise gradient, not the clipped surrogate; the reading is in :func:`p3o`).

Like the other pair objectives it writes each pair's loss on its two samples' actions
(:mod:`~genalign.algorithms.objectives.preference_pairs`) and declares ``whole_groups`` and
``aggregation="seq_mean_token_mean"``. ``n`` samples, ``P`` pairs, ``T`` actions.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES, checked_binding
from genalign.algorithms.objectives.preference_pairs import (
    PairSelection,
    check_pair_options,
    pair_metrics,
    pairs_on_actions,
    preference_inputs,
)
from genalign.algorithms.scores import ScoreOutput

ClipMode = Literal["separate", "joint"]


def _clipped_surrogate(ratio: Tensor, advantage: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic loss ``max(−ρA, −clip(ρ, 1−ε, 1+ε)A)`` ``[P]`` and whether the clip was active ``[P]``."""
    unclipped, clipped = -ratio * advantage, -ratio.clamp(1.0 - eps, 1.0 + eps) * advantage  # [P]
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _check_p3o(*, eps: float, clip: str, pairs: str, min_gap: float) -> None:
    if not 0 < eps < 1:
        raise ValueError(f"eps={eps!r} must be in (0, 1) (the trajectory ratio's clip range, e.g. 0.2).")
    if clip not in ("separate", "joint"):
        raise ValueError(f"clip={clip!r} must be 'separate' (each sample's ratio) or 'joint' (the pair's ratio).")
    check_pair_options(pairs, min_gap)


@OBJECTIVES.register(
    "p3o",
    bind=checked_binding("p3o", _check_p3o),
    needs=("combined_reward",),
    whole_groups=True,
    aggregation="seq_mean_token_mean",
    formula="ρ_i = exp(Σ_t (logπθ − logπ_old)); pairs (w, l) of a group, Δ = (r_w − r_l)/2; separate: "
    "ℓ_p = max(−ρ_wΔ, −clip(ρ_w)Δ) + max(ρ_lΔ, clip(ρ_l)Δ); joint: ℓ_p = max(−(ρ_w/ρ_l)Δ, −clip(ρ_w/ρ_l)Δ)",
    source="[97] P3O; reading chosen: the clipped surrogates of the trajectory-wise pairwise gradient",
    summary="Trajectory-wise pairwise policy gradient on reward differences inside each group (invariant to a "
    "prompt's reward offset), made proximal by clipping each trajectory ratio or the pair's relative ratio.",
)
def p3o(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    eps: float = 0.2,
    clip: ClipMode = "separate",
    pairs: PairSelection = "all",
    min_gap: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """P3O [97]: reinforcement learning from relative feedback. Its trajectory-wise pairwise policy gradient is
    ``½ (r_w − r_l) ∇(logπθ(y_w) − logπθ(y_l))`` for two responses of one prompt: only reward *differences* enter, so
    any per-prompt offset of the reward leaves the update unchanged, and the whole response is one action.

    Reading chosen: the abstract does not give the proximal surrogate. genalign takes every pair of a group (or the
    best and worst), ``Δ = (r_w − r_l)/2`` and the trajectory ratios ``ρ_i = exp(Σ_t logπθ − logπ_old)``; with
    ``clip="separate"`` each sample's ratio is clipped PPO-style with its pairwise advantage (``+Δ`` for the winner,
    ``−Δ`` for the loser), with ``clip="joint"`` the pair's relative ratio ``ρ_w/ρ_l`` (the importance weight of
    the direction ``logπ(y_w) − logπ(y_l)``) is clipped with advantage ``Δ``. At ``ρ = 1`` both have the pairwise
    gradient above.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: unused (the pairs and their gaps come from ``combined_reward``).
        batch: ``mask``, ``group_ids``, ``combined_reward`` ``[n]``, ``old_logp`` ``[n, T]``.
        eps: the clip range of the trajectory ratio, in (0, 1).
        clip: ``"separate"`` or ``"joint"``; pairs: ``"all"`` or ``"best_worst"``; min_gap: the reward gap a pair
            needs.
    Returns:
        ``(loss [n, T], metrics)`` with ``p3o/pairs``, ``p3o/ordered_pairs`` and ``p3o/margin`` (of the log ratio
        ``logρ_w − logρ_l``) and ``p3o/clip_frac``.
    """
    _check_p3o(eps=eps, clip=clip, pairs=pairs, min_gap=min_gap)
    inputs = preference_inputs(score, batch, "p3o", selection=pairs, min_gap=min_gap, reference=False)
    found, logp, mask = inputs.pairs, inputs.logp, inputs.mask
    old_logp = require(batch, "old_logp", "objective 'p3o'").to(logp.dtype)
    log_ratio = torch.where(mask > 0, logp - old_logp, 0.0).sum(1)  # [n] log ρ_i
    half_gap = 0.5 * found.gap.to(logp.dtype)  # [P] Δ
    relative = log_ratio[found.chosen] - log_ratio[found.rejected]  # [P] log(ρ_w/ρ_l)
    if clip == "separate":
        winner, winner_clipped = _clipped_surrogate(log_ratio[found.chosen].exp(), half_gap, eps)  # [P]
        loser, loser_clipped = _clipped_surrogate(log_ratio[found.rejected].exp(), -half_gap, eps)  # [P]
        pair_losses, clipped = winner + loser, (winner_clipped.float() + loser_clipped.float()) / 2
    else:
        pair_losses, active = _clipped_surrogate(relative.exp(), half_gap, eps)  # [P]
        clipped = active.float()
    loss = pairs_on_actions(pair_losses, found, mask)  # [n, T]
    metrics = pair_metrics("p3o", relative, found)
    metrics["p3o/clip_frac"] = clipped.mean().detach() if found.num_pairs else torch.tensor(0.0)
    return loss, metrics


__all__ = ["p3o"]
