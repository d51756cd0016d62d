"""The estimator without a baseline (REINFORCE): for rewards that already had a baseline subtracted upstream, by a
reward shaper (``probe_baseline``) or a combiner, and for plain REINFORCE.

Signature and shared rules: :mod:`genalign.algorithms.advantages.base` (except the constant-group rule: a group whose
rewards are all equal keeps them as advantages, there is no group baseline to cancel them)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import as_columns, batch_stats, group_stats, like_input, make_groups
from genalign.algorithms._validation import check_rewards
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps


@ADVANTAGE_ESTIMATORS.register(
    "reinforce",
    group_free=True,
    formula="A_i = r_i; whiten: A_i = (r_i − mean_B r)/(std_B r + eps) over every valid reward of the batch",
    source="REINFORCE (Williams, 1992); whiten: REINFORCE++'s global batch normalisation",
    summary="No group baseline: the reward the estimator receives is the advantage (optionally whitened over the "
    "batch); for shapers that subtract their own baseline, e.g. probe_baseline.",
)
def reinforce(
    rewards: Tensor, group_ids: Tensor, *, whiten: bool = False, eps: float = 1e-6, unbiased_std: bool = True
) -> Tensor:
    """REINFORCE: ``A_i = r_i``, no baseline. With ``whiten`` the rewards are standardised over every valid reward
    of the batch passed in (REINFORCE++'s global normalisation; call it on the whole optimisation batch): a constant
    shift of every reward then cancels, a per-group one does not.

    Use it after a shaper that already subtracts a baseline (``probe_baseline``: ``r − v̂``); any group estimator
    would subtract the group mean again. Missing rewards and groups with fewer than 2 valid rewards get 0 (shared
    rules), except a group of one sample (``algorithm.group_size: 1``, which this estimator allows: it needs no
    group), whose valid reward is its advantage.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        whiten: standardise over the batch.
        eps: added to the batch std when whitening.
        unbiased_std: ``n − 1`` (True) or ``n`` (False) in the batch variance.
    Returns:
        advantages, same shape as ``rewards``.
    """
    check_eps(eps)
    rewards = check_rewards(rewards)
    columns, groups = as_columns(rewards), make_groups(group_ids, rewards.shape[0], min_size=1)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    advantages = torch.nan_to_num(columns, nan=0.0)  # [N, K]
    if whiten:
        mean, std = batch_stats(columns, ~torch.isnan(columns), unbiased=unbiased_std)  # [K], [K]
        advantages = (advantages - mean) / (std + eps)
    alone = (groups.sizes == 1)[groups.index][:, None]  # [N, 1] a group of one sample: its reward is usable
    usable = ~torch.isnan(columns) & ((stats.count[groups.index] >= 2) | alone)  # [N, K] (the shared rule + alone)
    return like_input(torch.where(usable, advantages, 0.0), rewards)
