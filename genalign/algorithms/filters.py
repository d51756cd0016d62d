"""Group filters: zero-variance detection and DAPO dynamic sampling.

A group whose rewards are all equal has zero advantage under every mean-baseline estimator and teaches nothing
(formulas.md §1, [297]). :func:`frac_reward_zero_std` counts such groups for logging; :func:`dynamic_sampling` keeps
sampling until enough groups with reward std > ``tol`` are found (DAPO), with a bounded number of rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms._validation import check_rewards

Payload = TypeVar("Payload")


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
    groups = make_groups(group_ids, rewards.shape[0])
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
    groups = make_groups(group_ids, rewards.shape[0])
    per_group = torch.zeros(groups.num_groups, dtype=torch.bool, device=flagged.device)
    per_group[groups.index] = flagged
    return per_group.float().mean().item()


@dataclass
class DynamicSamplingResult(Generic[Payload]):
    """What :func:`dynamic_sampling` kept.

    Attributes:
        rewards: ``[M]`` rewards of the kept samples, in the order of ``parts``.
        group_ids: ``[M]`` long, kept groups renumbered ``0 .. num_kept - 1`` (ids of different rounds never clash).
        parts: one ``(payload, index)`` per round that kept something: ``index`` ``[n_r]`` are the rows of that
            round's payload that were kept; select them from the payload (e.g. ``Rollout.select``) and concatenate.
        num_kept: groups kept.
        num_dropped: groups sampled but dropped (zero std, or beyond ``num_groups``).
        rounds: number of calls to ``resample``.
    """

    rewards: Tensor
    group_ids: Tensor
    parts: list[tuple[Payload, Tensor]]
    num_kept: int
    num_dropped: int
    rounds: int


def dynamic_sampling(
    resample: Callable[[int], tuple[Tensor, Tensor, Payload]],
    *,
    num_groups: int,
    max_rounds: int = 3,
    tol: float = 0.0,
) -> DynamicSamplingResult[Payload]:
    """DAPO dynamic sampling: keep groups whose reward std is ``> tol`` until ``num_groups`` are kept.

    Round ``r`` calls ``resample(missing)`` with the number of groups still missing (``num_groups`` in the first
    round); the function may sample more than asked (over-sampling). Extra kept groups beyond ``num_groups`` are
    dropped (first come, first kept). After ``max_rounds`` the result may hold fewer than ``num_groups`` groups: check
    ``num_kept`` and decide (train on fewer, or skip the step).

    Args:
        resample: ``resample(num_groups) -> (rewards [n], group_ids [n], payload)`` with rewards ``[n]`` (combined,
            NaN = missing) and integer group ids.
        num_groups: groups wanted (> 0).
        max_rounds: upper bound on calls to ``resample`` (>= 1).
        tol: a group is kept when its reward std is ``> tol``.
    Returns:
        :class:`DynamicSamplingResult`.
    """
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    kept_rewards: list[Tensor] = []
    kept_groups: list[Tensor] = []
    parts: list[tuple[Payload, Tensor]] = []
    num_kept = num_dropped = rounds = 0
    while num_kept < num_groups and rounds < max_rounds:
        rounds += 1
        rewards, group_ids, payload = resample(num_groups - num_kept)
        rewards = _check_outcome_rewards(rewards)
        groups = make_groups(group_ids, rewards.shape[0])
        informative = group_reward_std(rewards, group_ids) > tol  # [N]
        per_group = torch.zeros(groups.num_groups, dtype=torch.bool, device=rewards.device)
        per_group[groups.index] = informative
        chosen = torch.nonzero(per_group).flatten()[: num_groups - num_kept]  # [g] group slots, in id order
        num_dropped += groups.num_groups - chosen.numel()
        if chosen.numel() == 0:
            continue
        renumber = torch.full((groups.num_groups,), -1, dtype=torch.long, device=rewards.device)
        renumber[chosen] = torch.arange(chosen.numel(), device=rewards.device) + num_kept
        new_ids = renumber[groups.index]  # [N], -1 = not kept
        rows = torch.nonzero(new_ids >= 0).flatten()  # [n_r]
        kept_rewards.append(rewards[rows])
        kept_groups.append(new_ids[rows])
        parts.append((payload, rows))
        num_kept += chosen.numel()
    empty = torch.empty(0)
    return DynamicSamplingResult(
        rewards=torch.cat(kept_rewards) if kept_rewards else empty,
        group_ids=torch.cat(kept_groups) if kept_groups else empty.long(),
        parts=parts,
        num_kept=num_kept,
        num_dropped=num_dropped,
        rounds=rounds,
    )
