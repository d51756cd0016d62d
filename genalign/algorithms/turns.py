"""The turn structure of multi-turn rollouts, for the rules that read it: per-turn tables of a sample's actions,
tables laid back on the actions, the per-turn reward table and group statistics per (prompt, turn).

A multi-turn rollout records ``turn_ids`` ``[N, T]`` (the model turn of each action position, from 0; environment tokens
carry the turn they answer and have mask 0) and ``turn_rewards`` ``[N, K]`` (the environment's reward of each model
turn, NaN where it gave none) (:mod:`genalign.algorithms.signals`). Turn ``k`` of sample ``i`` is *present* when it
holds at least one valid action. Tables over turns are ``[N, K]`` with ``K`` = the largest turn of any valid action
+ 1; an entry of an absent turn is NaN where the table holds values that can be missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign.algorithms._groups import Groups, GroupStats, group_stats, make_groups
from genalign.algorithms.batch import StepBatch


@dataclass(frozen=True)
class TurnLayout:
    """Where the turns of ``N`` samples lie.

    Attributes:
        turns: ``[N, T]`` long, the turn of each action position (``turn_ids``).
        valid: ``[N, T]`` bool, the trained actions (``mask > 0``).
        lengths: ``[N, K]`` float, the valid actions of each turn (0: absent).
    """

    turns: Tensor
    valid: Tensor
    lengths: Tensor

    @property
    def present(self) -> Tensor:
        """``[N, K]`` bool: the turn holds at least one valid action."""
        return self.lengths > 0

    @property
    def width(self) -> int:
        """``K``."""
        return self.lengths.shape[1]


def turn_layout(batch: StepBatch, option: str) -> TurnLayout:
    """The layout of the batch's ``turn_ids`` over its ``mask`` (an error naming ``option`` when it has no
    ``turn_ids``)."""
    mask = batch.mask
    turns = batch.require("turn_ids", option).long().to(mask.device)  # [N, T]
    width = turn_width(turns, mask)
    return TurnLayout(turns, mask > 0, turn_lengths(turns, mask, width))


def turn_width(turns: Tensor, mask: Tensor) -> int:
    """``K``: the largest turn index of a valid action + 1 (1 when there is no valid action)."""
    valid = mask > 0
    return int(torch.where(valid, turns, 0).max()) + 1 if bool(valid.any()) else 1


def turn_sums(values: Tensor, turns: Tensor, mask: Tensor, width: int) -> Tensor:
    """``[N, K]``: the sum of ``values`` ``[N, T]`` over the valid actions of each turn (0 for an absent turn)."""
    index = turns.clamp(0, width - 1)  # [N, T]
    masked = torch.where(mask > 0, values, 0.0)  # [N, T]
    return masked.new_zeros(values.shape[0], width).scatter_add_(1, index, masked)


def turn_lengths(turns: Tensor, mask: Tensor, width: int) -> Tensor:
    """``[N, K]`` float: the number of valid actions of each turn (0: the turn is absent)."""
    return turn_sums(torch.ones_like(mask, dtype=torch.float32), turns, mask, width)


def turn_means(values: Tensor, turns: Tensor, mask: Tensor, width: int) -> Tensor:
    """``[N, K]``: the mean of ``values`` ``[N, T]`` over the valid actions of each turn, NaN for an absent turn."""
    lengths = turn_lengths(turns, mask, width).to(values.dtype)  # [N, K]
    sums = turn_sums(values, turns, mask, width)  # [N, K]
    return torch.where(lengths > 0, sums / lengths.clamp_min(1.0), torch.nan)


def per_turn(table: Tensor, turns: Tensor) -> Tensor:
    """``[N, T]``: the entry of ``table`` ``[N, K]`` of each action's turn (turns past ``K − 1`` read the last)."""
    return table.gather(1, turns.clamp(0, table.shape[1] - 1).to(table.device))


def last_turns(present: Tensor) -> Tensor:
    """``[N, K]`` bool: the last present turn of each sample (none for a sample without a present turn)."""
    counted = present.long().cumsum(1)  # [N, K]
    return present & (counted == present.long().sum(1, keepdim=True))


def turn_reward_table(batch: StepBatch, option: str, present: Tensor) -> Tensor:
    """``[N, K]`` float: the batch's ``turn_rewards`` aligned on the ``K`` columns of ``present`` ``[N, K]`` (cut or
    NaN-padded), NaN where the turn is absent or the environment gave no reward."""
    rewards = batch.require("turn_rewards", option).to(present.device)  # [N, K']
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    table = torch.full(present.shape, torch.nan, dtype=rewards.dtype, device=present.device)  # [N, K]
    width = min(present.shape[1], rewards.shape[1])
    table[:, :width] = rewards[:, :width]
    return torch.where(present, table, torch.nan)


def group_turn_stats(table: Tensor, group_ids: Tensor) -> tuple[GroupStats, Groups]:
    """NaN-aware statistics of ``table`` ``[N, K]`` (NaN = absent) over the samples of each (group, turn), every field
    ``[G, K]`` (unbiased std), and the groups of ``group_ids`` ``[N]``: a sample's entry is ``stats.mean[groups.index]``
    ``[N, K]``. A lone sample is allowed (its std is 0)."""
    groups = make_groups(group_ids.to(table.device), table.shape[0], min_size=1)
    return group_stats(table, groups, unbiased=True), groups


__all__ = [
    "TurnLayout",
    "group_turn_stats",
    "last_turns",
    "per_turn",
    "turn_layout",
    "turn_lengths",
    "turn_means",
    "turn_reward_table",
    "turn_sums",
    "turn_width",
]
