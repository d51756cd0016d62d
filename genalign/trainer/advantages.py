"""Rewards of one step -> advantages, computed over the GLOBAL batch (all processes) and sliced back per process."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign import algorithms as alg
from genalign.config.schema import AlgorithmConfig
from genalign.trainer.distributed import all_gather_cat, rank_and_world


@dataclass
class StepAdvantages:
    advantages: Tensor  # [n] local
    combined_reward: Tensor  # [n] local, after KL-in-reward shaping
    zero_std: Tensor  # [n] bool local: the sample's group has (near-)identical rewards
    group_reward_std: Tensor  # [n] local: std of the combined rewards of the sample's group
    group_mean: Tensor  # [n] local: mean combined reward of the sample's group (success rate for 0/1 rewards)
    stats: dict[str, float]  # statistics over the global batch (all processes), for logging


def step_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    cfg: AlgorithmConfig,
    kl_per_sample: Tensor | None = None,
    state: alg.AdvantageState | None = None,
) -> StepAdvantages:
    """Args: rewards ``[n, K]`` (NaN = not applicable), group_ids ``[n]`` globally unique, weights ``[K]``,
    kl_per_sample ``[n]`` (only with ``kl_placement == "reward"``), state: statistics of earlier steps for the
    estimators that use them (:func:`genalign.algorithms.make_advantage_state`), updated here."""
    rank, _ = rank_and_world()
    sizes = all_gather_cat(torch.tensor([rewards.shape[0]]))
    start = int(sizes[:rank].sum())
    stop = start + rewards.shape[0]
    all_rewards, all_groups = all_gather_cat(rewards), all_gather_cat(group_ids)  # [N, K], [N]
    combined, stats = alg.REWARD_COMBINERS.get(cfg.reward_combination)(
        all_rewards, all_groups, weights, **cfg.reward_combination_args
    )  # [N]
    if kl_per_sample is not None:
        combined = alg.kl_in_reward(combined, all_gather_cat(kl_per_sample), cfg.kl_coef)
    hyperparameters = (state.hyperparameters() if state is not None else {}) | cfg.advantage_args
    advantages = alg.compute_advantages(
        cfg.advantage, combined, all_groups, clip=cfg.advantage_clip, **hyperparameters
    )  # [N]
    if state is not None:
        state.update(combined, all_groups)
    group_std = alg.group_reward_std(combined, all_groups)  # [N]
    groups = all_groups.unique(return_inverse=True)[1]  # [N] in 0..G-1
    valid = ~combined.isnan()
    sums = torch.zeros(int(groups.max()) + 1).index_add_(0, groups, torch.where(valid, combined, 0.0).float())
    counts = torch.zeros_like(sums).index_add_(0, groups, valid.float())
    group_mean = (sums / counts.clamp_min(1))[groups]  # [N]
    zero_std = alg.zero_std_mask(combined, all_groups, tol=cfg.dynamic_sampling.std_tol)  # [N]
    stats = dict(stats)
    stats["frac_reward_zero_std"] = float(
        alg.frac_reward_zero_std(combined, all_groups, tol=cfg.dynamic_sampling.std_tol)
    )
    stats["advantage/abs_mean"] = float(advantages.abs().mean())
    valid = combined[~combined.isnan()]
    stats["reward/mean"] = float(valid.mean()) if valid.numel() else float("nan")
    stats["reward/std"] = float(valid.std()) if valid.numel() > 1 else 0.0
    local = slice(start, stop)
    return StepAdvantages(
        advantages[local], combined[local], zero_std[local], group_std[local], group_mean[local], stats
    )
