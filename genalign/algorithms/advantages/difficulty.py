"""Noise-, difficulty- and history-aware estimators: noise-aware and difficulty-balanced advantages, direct credit for
zero-variance groups, and the cross-step statistics of empirical-Bayes, smoothed standardisation and momentum
baselines (their earlier statistics arrive as float hyper-parameters from :mod:`genalign.algorithms.advantages.state`).

Signature and shared rules: :mod:`genalign.algorithms.advantages.base`."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import (
    group_stats,
    group_sum,
)
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps, finish, prepare, valid_mask


@ADVANTAGE_ESTIMATORS.register(
    "difficulty_balanced",
    formula="A_i = λ_G·(r_i − mean_G)/(MAD_G + eps), MAD_G = mean_G|r − mean_G|; λ_G = B_v·softmax_G(−mean_G/τ) over "
    "the B_v non-constant groups of the batch, τ = 2 (temperature=None: λ = 1)",
    source="[213] DGPO (MathForge; AMAP-ML/MathForge grpo_trainer: enable_dgpo, enable_dgpo_dqw, dgpo_dqw_temp = "
    "2.0); differs: difficulty from the combined reward, not the first reward function",
    summary="DGPO's two parts: mean-absolute-deviation normalisation (equal update size per question, DGAE) and "
    "a softmax weighting towards harder questions (DQW, τ = 2).",
)
def difficulty_balanced(
    rewards: Tensor, group_ids: Tensor, *, temperature: float | None = 2.0, eps: float = 1e-6
) -> Tensor:
    """Difficulty-aware advantages of DGPO [213], both of its parts. Difficulty-balanced group advantage estimation
    (DGAE): dividing by the group's mean absolute deviation makes ``Σ_i |A_i|`` equal to the number of samples for
    every non-constant group, whereas GRPO's std division gives hard (and easy) questions a smaller total update
    (``Σ|A| ∝ √(p(1−p))`` for 0/1 rewards). Difficulty-aware question-level weighting (DQW):
    ``λ_G = B_v · softmax(−mean_G / τ)`` over the ``B_v`` non-constant groups of the batch (mean 1 over them), larger
    for harder questions; constant groups have no advantage to weigh.

    Follows the reference code (AMAP-ML/MathForge, ``trl/trainer/grpo_trainer.py`` with ``enable_dgpo``,
    ``enable_dgpo_dqw``; its scripts and config default ``dgpo_dqw_temp = 2.0``): ``τ = 2`` by default;
    ``temperature=None`` keeps DGAE alone (the reference's ``enable_dgpo_dqw=False``). Differences: the reference reads a question's
    difficulty from its first reward function (accuracy) and genalign from the rewards the estimator receives (the
    combined reward; the same with one reward); the reference adds ``1e-4`` to ``Σ|A|``, genalign ``eps`` to the MAD.
    The reference also rescales the advantages so that the token mean runs over the non-constant groups only: set
    ``algorithm.drop_zero_std_groups: true`` for that. The weighting uses the batch's groups: compute it on the whole
    optimisation batch (the trainer does).

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        temperature: ``τ > 0`` of the question weighting (2.0, the reference's), or None for no weighting (DGAE
            alone).
        eps: added to the MAD.
    """
    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature must be > 0 or None (no question weighting), got {temperature!r}")
    check_eps(eps)
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=False)
    valid = valid_mask(columns, groups, stats)  # [N, K]
    centred = torch.where(valid, columns - stats.mean[groups.index], 0.0)  # [N, K]
    mad = group_sum(centred.abs(), groups) / stats.count.clamp_min(1.0)  # [G, K]
    advantages = torch.where(stats.constant[groups.index], 0.0, centred / (mad[groups.index] + eps))  # [N, K]
    if temperature is not None:
        weighed = (stats.count >= 2) & ~stats.constant  # [G, K] the B_v groups with an advantage
        logits = torch.where(weighed, -stats.mean / temperature, -torch.inf)  # [G, K]
        weights = torch.softmax(logits, dim=0) * weighed.sum(0)  # [G, K], mean 1 over the weighed groups
        advantages = advantages * torch.nan_to_num(weights, nan=0.0)[groups.index]
    return finish(advantages, columns, groups, stats, rewards)


# ------------------------------------------------------------------- statistics of earlier steps: the bound forms


# ------------------------------------------------------------------------------------- statistics of earlier steps
