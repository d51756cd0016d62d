"""VERL [2]: exploration and exploitation read from the effective rank of a response's hidden states and its
derivatives along the response, turned into a bounded advantage bonus (experimental tier)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES

#: indicator order of the explore / exploit weight vectors
INDICATORS = ("acceleration", "velocity", "rank")
#: relative deviations are clamped to ``±MAX_DEVIATION`` (as the published code)
MAX_DEVIATION = 5.0


def effective_rank(matrix: Tensor) -> Tensor:
    """``[B]`` effective rank ``exp(−Σ_k p_k log p_k)``, ``p = σ / Σσ``, of the centred rows of ``matrix`` ``[B, k, H]``
    (``σ`` its singular values); 1 for a matrix whose centred rows are all zero (one row, or identical rows)."""
    centred = matrix - matrix.mean(dim=1, keepdim=True)  # [B, k, H]
    singular = torch.linalg.svdvals(centred.double())  # [B, min(k, H)]
    total = singular.sum(-1, keepdim=True)  # [B, 1]
    p = torch.where(total > 0, singular / total.clamp_min(1e-300), 0.0)  # [B, min(k, H)]
    return torch.exp(-torch.special.xlogy(p, p).sum(-1))  # [B]


def prefix_ranks(hidden: Tensor, length: int, stride: int) -> list[float]:
    """The effective ranks of the prefixes ``[:k]`` of one response's hidden states ``hidden`` ``[L, H]`` at
    ``k = stride, 2·stride, ...`` and at ``k = length`` (the whole response) when it is not a multiple."""
    points = list(range(stride, length + 1, stride))
    if not points or points[-1] != length:
        points.append(length)
    return [float(effective_rank(hidden[None, :k])[0]) for k in points]


def rank_dynamics(ranks: Sequence[float]) -> tuple[float, float, float]:
    """``(ERA, ERV, ER)`` of a response from its prefix effective ranks ``ER_1 .. ER_m``: ``ER = ER_m``; the velocity
    ``ERV = mean_{j ≥ 2} d_j`` with ``d_j = ER_j − mean(ER_1 .. ER_{j−1})``; the acceleration ``ERA = mean_{j ≥ 3}
    (d_j − d_{j−1})`` (0 when there are too few points)."""
    velocities = [ranks[j] - sum(ranks[:j]) / j for j in range(1, len(ranks))]
    accelerations = [velocities[j] - velocities[j - 1] for j in range(1, len(velocities))]
    velocity = sum(velocities) / len(velocities) if velocities else 0.0
    acceleration = sum(accelerations) / len(accelerations) if accelerations else 0.0
    return acceleration, velocity, ranks[-1]


def rank_indicators(hidden: Tensor, mask: Tensor, stride: int) -> Tensor:
    """``[N, 3]`` (ERA, ERV, ER) of each response from its hidden states ``hidden`` ``[N, T, H]`` at its valid actions
    (``mask`` ``[N, T]``; holes, such as environment tokens, are skipped); zeros for a response without actions."""
    rows = []
    for i in range(hidden.shape[0]):
        states = hidden[i][mask[i] > 0].float()  # [L, H]
        rows.append(rank_dynamics(prefix_ranks(states, states.shape[0], stride)) if states.shape[0] else (0.0,) * 3)
    return torch.tensor(rows, dtype=torch.float64)


def _check(stride: int, gain: float, kappa: float, scale: float, weights: Sequence[Sequence[float]]) -> None:
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride={stride!r} must be an integer >= 1 (actions between two prefix ranks)")
    if not (gain >= 0 and kappa >= 1 and scale >= 0):
        raise ValueError(
            f"need gain >= 0, kappa >= 1 (the bonus never flips an advantage's sign) and scale >= 0, got "
            f"gain={gain!r}, kappa={kappa!r}, scale={scale!r}"
        )
    for vector in weights:
        if len(vector) != len(INDICATORS):
            raise ValueError(f"explore_weights and exploit_weights weigh {INDICATORS}: 3 numbers each, got {vector!r}")


@CREDIT_RULES.register(
    "effective_rank_bonus",
    needs=("hidden",),
    formula="ER = exp(H(σ/Σσ)) of the centred hidden states; ERV, ERA = 1st/2nd differences of prefix ERs; "
    "δ_k = clamp((x_k − mean_G x_k)/(|mean_G x_k| + 1e-8), ±5); τ = σ(g·δ_ERA); w = τ·w_explore + (1−τ)·w_exploit; "
    "aux = c·Σ_k w_k tanh δ_k; A_it ← A_it + min(relu(aux_i), |A_it|/κ)",
    source="[2] VERL (Velocity-Exploiting Rank-Learning; defaults from the published training script)",
    summary="An advantage bonus from the hidden states' effective rank (exploration) and its velocity "
    "(exploitation), blended by the rank's acceleration, and bounded by a fraction of the advantage.",
)
def effective_rank_bonus(
    advantages: Tensor,
    batch: StepBatch,
    *,
    stride: int = 40,
    gain: float = 2.0,
    kappa: float = 2.0,
    scale: float = 1.0,
    explore_weights: Sequence[float] = (0.0, 0.0, 1.0),
    exploit_weights: Sequence[float] = (0.0, 1.0, 0.0),
    placement: Literal["every_action", "last_action"] = "every_action",
) -> Tensor:
    """Velocity-Exploiting Rank-Learning [2]: exploration is measured at the hidden-state level by the effective rank
    (ER) of a response's hidden states, exploitation by its first derivative along the response (ERV, how fast new
    directions still open up), and the second derivative (ERA) acts as a meta-controller: a response whose ERA is above
    the baseline leans on the exploration channel (its ER), one below on the exploitation channel (its ERV). The
    resulting auxiliary reward becomes a non-negative advantage bonus capped at ``|A|/κ``, so it reinforces but never
    outweighs the outcome.

    ER of a prefix is ``exp`` of the entropy of its normalised singular values (:func:`effective_rank`); prefixes are
    taken every ``stride`` actions and at the end (:func:`prefix_ranks`, :func:`rank_dynamics`). Each indicator's
    relative deviation from its baseline is clamped to ``±5``; ``τ = σ(gain·δ_ERA)`` blends ``explore_weights`` and
    ``exploit_weights`` (over ERA, ERV, ER); ``aux = scale·Σ_k w_k·tanh(δ_k)``. Defaults are the published script's
    (stride 40, gain 2, κ = 2, fixed scale 1, explore on ER, exploit on ERV).

    Reading chosen: the published code keeps each indicator's baseline as an exponential moving average of earlier
    steps' batch means; a credit rule sees one process's batch, where such a running statistic would differ between
    processes, so genalign takes the mean of the sample's group instead (stateless, independent of the process and
    micro-batch split). The code adds the bonus at the response's last token only; ``placement: last_action`` does
    that, the default adds it to every action (the response-level bonus the paper describes). ``hidden`` is the last
    hidden state predicting each action.

    Args:
        advantages: ``[N, T]`` incoming advantages.
        batch: reads ``hidden`` ``[N, T, H]``, ``mask`` and ``group_ids``.
        stride: actions between two prefix ranks (>= 1).
        gain: the meta-controller's slope ``g >= 0``.
        kappa: ``κ >= 1``: the bonus is at most ``|A|/κ``.
        scale: ``c >= 0``, the auxiliary reward's weight.
        explore_weights, exploit_weights: weights over (ERA, ERV, ER).
        placement: ``every_action`` or ``last_action``.
    Returns:
        ``[N, T]`` advantages with the bonus (unchanged on padding).
    """
    _check(stride, gain, kappa, scale, (explore_weights, exploit_weights))
    if placement not in ("every_action", "last_action"):
        raise ValueError(f"placement={placement!r} must be 'every_action' or 'last_action'")
    mask = batch.mask.to(advantages.device)
    indicators = rank_indicators(batch.require("hidden", "credit rule 'effective_rank_bonus'"), mask, stride)  # [N, 3]
    groups = make_groups(batch.group_ids.cpu(), indicators.shape[0], min_size=1)
    baseline = group_stats(indicators, groups, unbiased=False).mean[groups.index]  # [N, 3]
    deviation = ((indicators - baseline) / (baseline.abs() + 1e-8)).clamp(-MAX_DEVIATION, MAX_DEVIATION)  # [N, 3]
    tendency = torch.sigmoid(gain * deviation[:, 0:1])  # [N, 1] τ, from ERA
    explore = torch.tensor(list(explore_weights), dtype=torch.float64)
    exploit = torch.tensor(list(exploit_weights), dtype=torch.float64)
    weights = tendency * explore + (1.0 - tendency) * exploit  # [N, 3]
    aux = scale * (weights * torch.tanh(deviation)).sum(1)  # [N]
    bonus = torch.minimum(aux.clamp_min(0.0).to(advantages)[:, None], advantages.abs() / kappa)  # [N, T]
    valid = mask > 0
    if placement == "last_action":
        valid = valid & (torch.cumsum(mask, 1) == mask.sum(1, keepdim=True))  # [N, T] the last valid action only
    return torch.where(valid, advantages + bonus, advantages)  # [N, T]
