"""Group filters: zero-variance detection and DAPO dynamic sampling.

A group whose rewards are all equal has zero advantage under every mean-baseline estimator and teaches nothing
(formulas.md §1, [297]). :func:`frac_reward_zero_std` counts such groups for logging; :func:`informative_groups` picks the
samples of the informative groups to train on (DAPO dynamic sampling, from an over-sampled rollout).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms._validation import check_rewards


def _check_outcome_rewards(rewards: Tensor) -> Tensor:
    rewards = check_rewards(rewards)
    if rewards.ndim != 1:
        raise ValueError(f"rewards must have shape [N] (one combined reward per sample), got {list(rewards.shape)}")
    return rewards


def group_reward_std(rewards: Tensor, group_ids: Tensor, *, unbiased: bool = True) -> Tensor:
    """Standard deviation of each sample's group rewards, NaN-aware.

    Args:
        rewards: ``[N]``; NaN = missing (excluded).
        group_ids: ``[N]`` integer group of each sample.
        unbiased: divide the variance by ``n - 1`` (True) or ``n`` (False).
    Returns:
        ``[N]`` the std of the sample's group; exactly 0 for a group whose valid rewards are all equal and for a group
        with fewer than 2 valid rewards.
    """
    rewards = _check_outcome_rewards(rewards)
    groups = make_groups(group_ids, rewards.shape[0], min_size=1)  # a group of one sample has std 0
    stats = group_stats(rewards[:, None], groups, unbiased=unbiased)
    return stats.std[groups.index, 0]  # [N]


def zero_std_mask(rewards: Tensor, group_ids: Tensor, *, tol: float = 0.0) -> Tensor:
    """``[N]`` bool, True for samples whose group reward std is ``<= tol`` (the group carries no signal).

    Args:
        rewards: ``[N]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        tol: non-negative tolerance; 0 flags exactly-constant groups (and groups with < 2 valid rewards).
    """
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    return group_reward_std(rewards, group_ids) <= tol


def frac_reward_zero_std(rewards: Tensor, group_ids: Tensor, *, tol: float = 0.0) -> float:
    """Fraction of *groups* (not samples) whose reward std is ``<= tol``; logged as ``frac_reward_zero_std``.

    With equal group sizes this equals the fraction of samples.

    Args:
        rewards: ``[N]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        tol: non-negative tolerance.
    """
    flagged = zero_std_mask(rewards, group_ids, tol=tol)  # [N]
    groups = make_groups(group_ids, rewards.shape[0], min_size=1)  # a group of one sample has std 0
    per_group = torch.zeros(groups.num_groups, dtype=torch.bool, device=flagged.device)
    per_group[groups.index] = flagged
    return per_group.float().mean().item()


def informative_groups(
    group_ids: Tensor, zero_std: Tensor, *, drop_zero_std: bool, max_groups: int | None = None
) -> Tensor:
    """Indices ``[M]`` of the samples to train on: DAPO dynamic sampling in one round.

    With ``drop_zero_std`` the samples of groups whose rewards all agree are left out; with ``max_groups`` at most
    that many groups are kept, the first ones in sample order (the rollout was over-sampled by
    ``algorithm.dynamic_sampling.oversample`` so that enough informative groups remain). DAPO samples sequential
    rounds until the batch is full; one larger round is equivalent in expectation, batches better, and never needs
    rollouts of different lengths concatenated.

    Args:
        group_ids: ``[N]`` integer group of each sample, groups contiguous.
        zero_std: ``[N]`` bool, the sample's group has (near-)identical rewards (:func:`zero_std_mask`).
        drop_zero_std: leave those groups out.
        max_groups: keep at most this many groups (``None`` = all).
    """
    keep = torch.arange(group_ids.shape[0])
    if drop_zero_std:
        keep = (~zero_std).nonzero().flatten()
    if max_groups is not None:
        kept = group_ids[keep].unique_consecutive()[:max_groups]
        keep = keep[torch.isin(group_ids[keep], kept)]
    return keep
