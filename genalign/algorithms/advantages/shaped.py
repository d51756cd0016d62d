"""Estimators that reshape the group's reward distribution: the group-std dial, positive-only, sign-asymmetric,
Gaussianised, quantile and majority-boosted advantages (method catalogue).

Signature and shared rules: :mod:`genalign.algorithms.advantages.base`."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import (
    group_stats,
    padded_by_group,
)
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps, finish, prepare
from genalign.algorithms.advantages.group_baselines import grpo


# ------------------------------------------------------------------------------------------------- one dial, signs
@ADVANTAGE_ESTIMATORS.register(
    "std_dial",
    formula="A_i = (r_i − mean_G) / (std_G + eps)^α; α = 1 GRPO, α = 0 Dr. GRPO (DAPO: drop std = 0 groups)",
    source="[297] group-std one dial",
    summary="One continuous dial between dividing by the group std (GRPO) and not dividing (Dr. GRPO).",
)
def std_dial(
    rewards: Tensor, group_ids: Tensor, *, std_exponent: float = 1.0, eps: float = 1e-6, unbiased_std: bool = True
) -> Tensor:
    """The group-std "one dial" [297]: ``A = (r − mean_G) / (std_G + eps)^α``. ``α = 1`` is GRPO, ``α = 0`` Dr. GRPO;
    DAPO's third setting (discard groups with ``std = 0``) is ``algorithm.drop_zero_std_groups`` / dynamic sampling,
    since a constant group already has advantage 0 here. For 0/1 rewards ``std = √(p(1−p))`` (population) is the
    size of GRPO's update, so ``α`` sets how strongly prompts of middling difficulty are weighted.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        std_exponent: ``α`` in ``[0, 1]`` (values outside are allowed but over-/anti-weight; must be >= 0).
        eps: added to the group std before the power.
        unbiased_std: ``n − 1`` (True) or ``n`` (False).
    """
    if not std_exponent >= 0:
        raise ValueError(f"std_exponent must be >= 0 (1 = GRPO, 0 = Dr. GRPO), got {std_exponent!r}")
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    scale = (stats.std + eps).pow(std_exponent)  # [G, K]
    advantages = torch.where(
        stats.constant[groups.index], 0.0, (columns - stats.mean[groups.index]) / scale[groups.index]
    )
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "positive_only",
    formula="A_i = max(0, (r_i − mean_G) / (std_G + eps))",
    source="[267] WAPO",
    summary="Update only on completions with positive (GRPO) advantage.",
)
def positive_only(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, unbiased_std: bool = True) -> Tensor:
    """Winner-advantage updates [267]: the GRPO advantage with its negative part removed, so only completions better
    than their group's mean are reinforced (pair with any clip form; WAPO uses PPO's).

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        eps: added to the group std.
        unbiased_std: ``n − 1`` (True) or ``n`` (False).
    """
    return grpo(rewards, group_ids, eps=eps, unbiased_std=unbiased_std).clamp_min(0.0)


# ---------------------------------------------------------------------------------------------- other baselines


@ADVANTAGE_ESTIMATORS.register(
    "quantile",
    formula="A_i = r_i − Q_K(group), Q_K = smallest r with F_G(r) ≥ K (empirical inverse CDF); optional / std_G",
    source="[216] QAE",
    summary="Group K-quantile baseline: reinforces rare successes on hard prompts, targets rare failures on easy ones.",
)
def quantile(
    rewards: Tensor, group_ids: Tensor, *, quantile_level: float = 0.5, scale_by_std: bool = False, eps: float = 1e-6
) -> Tensor:
    """Quantile Advantage Estimation [216]: the baseline is the group's empirical ``K``-quantile. For 0/1 rewards with
    success rate ``p``: if ``p <= 1 − K`` the baseline is 0 and only successes get (positive) signal; otherwise it is
    1 and only failures get (negative) signal.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        quantile_level: ``K`` in ``(0, 1)``.
        scale_by_std: divide by the group std (+ ``eps``) as GRPO does (0 stays 0).
        eps: added to the std when ``scale_by_std``.
    """
    if not 0 < quantile_level < 1:
        raise ValueError(f"quantile_level must be in (0, 1), got {quantile_level!r}")
    check_eps(eps)
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=True)
    padded, _ = padded_by_group(columns, groups)  # [G, S, K]
    ordered = torch.sort(torch.where(torch.isnan(padded), torch.inf, padded), dim=1).values  # [G, S, K]
    rank = (torch.ceil(quantile_level * stats.count - 1e-9) - 1.0).clamp_min(0.0).long()  # [G, K]
    baseline = ordered.gather(1, rank[:, None, :]).squeeze(1)  # [G, K]
    advantages = columns - baseline[groups.index]  # [N, K]
    if scale_by_std:
        advantages = advantages / (stats.std[groups.index] + eps)
    return finish(advantages, columns, groups, stats, rewards)
