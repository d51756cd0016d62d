"""The advantage-estimator registry and its shared rules. Group-relative advantage estimators: outcome (or per-step) rewards -> advantages.

Every estimator has the signature ``fn(rewards, group_ids, **hp) -> advantages`` with

* ``rewards``: ``[N]`` float, or ``[N, K]`` per-step rewards (each column is normalised within groups on its own);
  NaN marks a missing reward;
* ``group_ids``: ``[N]`` integer, any values; samples with equal ids were drawn for the same prompt; groups may have
  different sizes but each needs at least 2 members (else ``ValueError``);
* ``advantages``: same shape as ``rewards``.

Shared rules (formulas.md §1): a missing reward is excluded from its group's statistics and gets advantage 0; a group
with fewer than 2 valid rewards has no baseline and all its members get advantage 0 (every estimator handles this);
a group whose valid rewards are all equal gets advantage exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from genalign.algorithms._groups import (
    Groups,
    GroupStats,
    as_columns,
    like_input,
    make_groups,
)
from genalign.algorithms._validation import check_rewards
from genalign.algorithms.options import bind_option
from genalign.registry import Registry

AdvantageEstimator = Callable[..., Tensor]


#: name -> ``fn(rewards [N] | [N, K], group_ids [N], **hp) -> advantages (same shape as rewards)``
ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", catalogue="genalign.experimental.advantages"
)


def prepare(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Groups]:
    rewards = check_rewards(rewards)
    return as_columns(rewards), make_groups(group_ids, rewards.shape[0])


def finish(advantages: Tensor, columns: Tensor, groups: Groups, stats: GroupStats, rewards: Tensor) -> Tensor:
    """Zero the advantage of missing rewards and of groups with fewer than 2 valid rewards."""
    usable = ~torch.isnan(columns) & (stats.count[groups.index] >= 2)  # [N, K]
    return like_input(torch.where(usable, advantages, 0.0), rewards)


def compute_advantages(
    name: str, rewards: Tensor, group_ids: Tensor, *, clip: float | None = None, **hp: float | bool
) -> Tensor:
    """Run estimator ``name`` with hyper-parameters ``hp``, then optionally clip the advantages to ``[-clip, clip]``.

    Flow-model recipes clip to ±5 (formulas.md §1).

    Args:
        name: a name in :data:`ADVANTAGE_ESTIMATORS`.
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        clip: positive bound, or ``None`` for no clipping.
    Returns:
        advantages, same shape as ``rewards``.
    """
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be a positive number or None, got {clip!r}")
    advantages = bind_option(ADVANTAGE_ESTIMATORS, name, hp)(rewards, group_ids)
    return advantages if clip is None else advantages.clamp(-clip, clip)


def valid_mask(columns: Tensor, groups: Groups, stats: GroupStats) -> Tensor:
    """``[N, K]`` bool: the reward is present and its group has a baseline (>= 2 valid rewards)."""
    return ~torch.isnan(columns) & (stats.count[groups.index] >= 2)


def check_eps(eps: float) -> None:
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
