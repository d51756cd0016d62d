"""VGPO [67] value-anchored group normalisation: the group-relative advantage plus an absolute term anchored to a
fixed reward value, weighted up as the group's reward diversity vanishes, so the signal does not fade to zero when a
group's rewards are all equal.

Signature and shared rules: :mod:`genalign.algorithms.advantages.base` (except the constant-group rule, broken on
purpose: that is the method).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps, finish, prepare


def anchor_weight(group_std: Tensor, *, alpha: float, tau: float) -> Tensor:
    """``λ_G = alpha · exp(−std_G / tau)`` (same shape as ``group_std``): ``alpha`` for a constant group, fading as the
    group's rewards spread out (``tau = 0``: the absolute term is off unless the group is constant)."""
    if tau == 0:
        return torch.where(group_std == 0, alpha, 0.0).to(group_std.dtype)
    return alpha * torch.exp(-group_std / tau)


@ADVANTAGE_ESTIMATORS.register(
    "value_anchored",
    formula="A_i = (r_i − mean_G)/(std_G + eps) + λ_G·(r_i − b), λ_G = α·exp(−std_G/τ)",
    source="[67] VGPO",
    summary="Group-normalised advantage plus an absolute term anchored at b that takes over as the group's reward "
    "spread vanishes (a constant group still gets a signal).",
)
def value_anchored(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    anchor: float = 0.5,
    alpha: float = 1.0,
    tau: float = 0.05,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> Tensor:
    """VGPO [67] absolute-value-enhanced group normalisation.

    ``A_i = (r_i − mean_G) / (std_G + eps) + λ_G · (r_i − anchor)`` with ``λ_G = alpha · exp(−std_G / tau)``.
    The relative term is GRPO's; the absolute term rewards a sample for its reward itself (measured from the fixed
    ``anchor``, not from its group), so a group whose rewards are all equal, e.g. all solved late in training, keeps a
    signal of sign ``r − anchor`` instead of none.

    Reading chosen: the abstract says group normalisation is replaced "with a novel process enhanced by absolute values
    to maintain a stable optimization signal even as reward diversity declines"; genalign adds an absolute term whose
    weight grows as the group's spread falls (an exponential in ``std_G / tau``). ``anchor = 0.5`` (the middle of a
    ``[0, 1]`` reward), ``alpha = 1``, ``tau = 0.05`` are genalign's defaults, not published values.

    Args:
        rewards: ``[N]`` or ``[N, K]`` (per-step columns are treated independently); NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        anchor: the absolute reference value ``b``.
        alpha: weight of the absolute term for a constant group (``>= 0``).
        tau: reward-spread scale over which the absolute term fades (``>= 0``).
        eps: added to the group std of the relative term.
        unbiased_std: ``n − 1`` (True) or ``n`` (False) in the group variance.
    Returns:
        advantages, same shape as ``rewards``; 0 for missing rewards and groups with fewer than 2 valid rewards.
    """
    check_eps(eps)
    if not (alpha >= 0 and tau >= 0):
        raise ValueError(f"value_anchored needs alpha >= 0 and tau >= 0, got alpha={alpha!r}, tau={tau!r}")
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    std = stats.std[groups.index]  # [N, K]
    scale = std + eps
    relative = torch.where(scale > 0, (columns - stats.mean[groups.index]) / scale.clamp_min(1e-300), 0.0)  # [N, K]
    absolute = anchor_weight(std, alpha=alpha, tau=tau) * (columns - anchor)  # [N, K]
    return finish(relative + absolute, columns, groups, stats, rewards)
