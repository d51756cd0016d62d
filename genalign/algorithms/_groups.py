"""NaN-aware per-group statistics, vectorised with ``index_add`` / ``scatter_reduce`` (no Python loop over groups).

Rewards are handled as ``[N, K]`` (``K`` = 1 for outcome rewards, ``K`` per-step columns otherwise); every column is
treated independently. NaN marks a missing reward: it is left out of every statistic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.algorithms._validation import check_group_ids


@dataclass(frozen=True)
class Groups:
    """Group membership of ``N`` samples.

    Attributes:
        index: ``[N]`` long, the group of each sample as ``0 .. G-1``.
        ids: ``[G]`` the original group ids, in the order of ``index``.
        sizes: ``[G]`` members per group (valid or not).
    """

    index: Tensor
    ids: Tensor
    sizes: Tensor

    @property
    def num_groups(self) -> int:
        return self.ids.shape[0]


def make_groups(group_ids: Tensor, num_samples: int, *, min_size: int = 2) -> Groups:
    """Map arbitrary integer ``group_ids`` ``[N]`` to ``0 .. G-1``; raise if a group has fewer than ``min_size`` members."""
    group_ids = check_group_ids(group_ids, num_samples)
    ids, index, sizes = torch.unique(group_ids, return_inverse=True, return_counts=True)
    too_small = sizes < min_size
    if too_small.any():
        bad_id, bad_size = ids[too_small][0].item(), sizes[too_small][0].item()
        raise ValueError(
            f"group_ids: group {bad_id} has {bad_size} member(s), but every group needs at least {min_size} samples "
            f"(group_ids has shape [N] with each prompt's id repeated group_size >= {min_size} times)"
        )
    return Groups(index=index, ids=ids, sizes=sizes)


def as_columns(rewards: Tensor) -> Tensor:
    """View ``[N]`` as ``[N, 1]``; keep ``[N, K]``."""
    return rewards[:, None] if rewards.ndim == 1 else rewards


def like_input(columns: Tensor, rewards: Tensor) -> Tensor:
    """Undo :func:`as_columns`."""
    return columns[:, 0] if rewards.ndim == 1 else columns


@dataclass(frozen=True)
class GroupStats:
    """Per-group, per-column statistics of the valid (non-NaN) rewards; every field is ``[G, K]``.

    ``std`` is exactly 0 for a group whose valid rewards are all equal (``constant``), and ``mean`` is then exactly the
    common value, so that ``r - mean`` is exactly 0 (no ``1e-17 / eps`` noise). ``std`` is 0 when ``count < 2``.
    """

    count: Tensor
    mean: Tensor
    std: Tensor
    constant: Tensor


def group_sum(values: Tensor, groups: Groups) -> Tensor:
    """Sum ``values`` ``[N, K]`` per group -> ``[G, K]``."""
    out = values.new_zeros((groups.num_groups, values.shape[1]))
    return out.index_add_(0, groups.index, values)


def group_stats(rewards: Tensor, groups: Groups, *, unbiased: bool) -> GroupStats:
    """NaN-aware mean and standard deviation of ``rewards`` ``[N, K]`` within each group."""
    valid = ~torch.isnan(rewards)  # [N, K]
    filled = torch.where(valid, rewards, 0.0)  # [N, K]
    count = group_sum(valid.to(rewards.dtype), groups)  # [G, K]
    mean = group_sum(filled, groups) / count.clamp_min(1.0)  # [G, K]
    centred = torch.where(valid, rewards - mean[groups.index], 0.0)  # [N, K]
    dof = count - 1.0 if unbiased else count  # [G, K]
    var = group_sum(centred.square(), groups) / dof.clamp_min(1.0)  # [G, K]
    std = torch.where(count >= 2, var.sqrt(), 0.0)  # [G, K]

    shape = (groups.num_groups, rewards.shape[1])
    index = groups.index[:, None].expand_as(rewards)  # [N, K]
    high = rewards.new_full(shape, -torch.inf).scatter_reduce(0, index, torch.where(valid, rewards, -torch.inf), "amax")
    low = rewards.new_full(shape, torch.inf).scatter_reduce(0, index, torch.where(valid, rewards, torch.inf), "amin")
    constant = (high == low) & (count >= 1)  # [G, K]
    mean = torch.where(constant, high, mean)  # exact common value
    std = torch.where(constant, 0.0, std)
    return GroupStats(count=count, mean=mean, std=std, constant=constant)


def batch_stats(values: Tensor, valid: Tensor, *, unbiased: bool) -> tuple[Tensor, Tensor]:
    """Mean and std ``[K]`` of ``values`` ``[N, K]`` over the valid entries of each column."""
    count = valid.sum(0).to(values.dtype)  # [K]
    filled = torch.where(valid, values, 0.0)  # [N, K]
    mean = filled.sum(0) / count.clamp_min(1.0)  # [K]
    centred = torch.where(valid, values - mean, 0.0)  # [N, K]
    dof = count - 1.0 if unbiased else count
    std = (centred.square().sum(0) / dof.clamp_min(1.0)).sqrt()  # [K]
    return mean, std


def padded_by_group(rewards: Tensor, groups: Groups) -> tuple[Tensor, Tensor]:
    """Lay rewards ``[N, K]`` out as ``[G, S_max, K]`` (NaN padding); also return each sample's slot ``[N]``."""
    order = torch.argsort(groups.index, stable=True)  # [N]
    starts = torch.cumsum(groups.sizes, 0) - groups.sizes  # [G]
    slot_sorted = torch.arange(order.numel(), device=order.device) - starts[groups.index[order]]  # [N]
    slot = torch.empty_like(slot_sorted)
    slot[order] = slot_sorted
    padded = rewards.new_full((groups.num_groups, int(groups.sizes.max()), rewards.shape[1]), torch.nan)
    padded[groups.index, slot] = rewards
    return padded, slot
