"""The estimator without a baseline (REINFORCE): for rewards that already had a baseline subtracted upstream, by a
reward shaper (``probe_baseline``) or a combiner, and for plain REINFORCE.

Signature and shared rules: :mod:`genalign.algorithms.advantages.base` (except the constant-group rule: a group whose
rewards are all equal keeps them as advantages, there is no group baseline to cancel them)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import batch_stats, group_stats
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps, finish, prepare


@ADVANTAGE_ESTIMATORS.register(
    "reinforce",
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
    rules).

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
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    advantages = torch.nan_to_num(columns, nan=0.0)  # [N, K]
    if whiten:
        mean, std = batch_stats(columns, ~torch.isnan(columns), unbiased=unbiased_std)  # [K], [K]
        advantages = (advantages - mean) / (std + eps)
    return finish(advantages, columns, groups, stats, rewards)
