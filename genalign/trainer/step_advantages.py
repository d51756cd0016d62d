"""Rewards of one step -> advantages, computed over the GLOBAL batch (all processes) and sliced back per process,
then per-action credit: everything the update needs besides the rollout (:func:`update_inputs`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign import algorithms as alg
from genalign.config.schema import AlgorithmConfig
from genalign.policies.base import Policy, Rollout
from genalign.trainer.distributed import all_gather_cat, rank_and_world
from genalign.trainer.rewards import RewardSet
from genalign.trainer.update import score_without_grad


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


@dataclass
class UpdateInputs:
    step: StepAdvantages  # the group-relative advantages and group statistics of the step
    advantages: Tensor  # [n] or [n, T] after per-action credit: what the objective multiplies
    old_logp: Tensor | None  # [n, T] behaviour log-probs, or None when the update is fully on-policy


def update_inputs(
    policy: Policy,
    rollout: Rollout,
    reward_table: Tensor,
    rewards: RewardSet,
    cfg: AlgorithmConfig,
    state: alg.AdvantageState | None,
    progress: float,
) -> UpdateInputs:
    """Advantages and old log-probs for one rollout: an optional scoring pass without gradient (old log-probs when the
    sampler's are not exact, entropy for credit, KL for KL-in-reward), group-relative advantages over the global
    batch, then per-action credit (the policy's dense step rewards or per-depth tree credit, a credit option, future
    KL, the policy's per-action weights).

    Args:
        reward_table: ``[n, K]`` rewards of the rollout (NaN = not applicable); progress: ``step / max_steps``.
    """
    kl_in_reward = cfg.kl_coef > 0 and cfg.kl_placement == "reward"
    need_old = not cfg.fully_on_policy and not policy.rollout_logp_is_exact
    prepass = None
    if need_old or cfg.credit != "none" or kl_in_reward or cfg.future_kl_coef:
        prepass = score_without_grad(
            policy, rollout, cfg.micro_batch_size, entropy=cfg.credit != "none",
            kl_estimator="k1" if cfg.future_kl_coef else cfg.kl_estimator if kl_in_reward else None,
        )  # fmt: skip
    kl_per_sample = (prepass.kl * rollout.action_mask).sum(1) if kl_in_reward else None  # [n]

    adv = step_advantages(reward_table, rollout.group_ids, rewards.weights, cfg, kl_per_sample, state)
    advantages = adv.advantages  # [n]
    dense = getattr(policy, "dense_step_advantages", None)  # DenseGRPO: reward gain of each step, per step
    dense_advantages = dense(rollout, rewards.weighted_sum) if callable(dense) else None
    if dense_advantages is not None:
        advantages = dense_advantages  # [n, T]
    per_action_hook = getattr(policy, "per_action_advantages", None)  # e.g. per-depth credit of tree rollouts
    if callable(per_action_hook):
        advantages = per_action_hook(rollout, advantages)  # [n] or [n, T]
    if cfg.credit != "none":
        weights = alg.CREDIT_WEIGHTS.get(cfg.credit)(
            advantages, rollout.action_mask, prepass.entropy, logp=rollout.old_logp, progress=progress,
            **cfg.credit_args,
        )  # fmt: skip
        advantages = advantages[:, None] * weights  # [n, T]
    if cfg.future_kl_coef:  # [75]: reverse-KL return-to-go, after normalisation
        advantages = alg.future_kl_advantages(advantages, prepass.kl, rollout.action_mask, coef=cfg.future_kl_coef)
    if "action_weights" in rollout.per_sample:  # per-action weights chosen by the policy (e.g. noise-aware)
        per_action = advantages if advantages.dim() == 2 else advantages[:, None]  # [n, T] or [n, 1]
        advantages = per_action * rollout.per_sample["action_weights"]  # [n, T]
    old_logp = None
    if not cfg.fully_on_policy:
        old_logp = rollout.old_logp if policy.rollout_logp_is_exact else prepass.old_logp
    return UpdateInputs(adv, advantages, old_logp)
