"""Rewards of one step -> advantages over the GLOBAL batch (all processes), sliced back per process, then per-action
credit: everything the update needs besides the rollout (:func:`update_inputs`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from genalign import algorithms as alg
from genalign.algorithms.credit import rule_needs
from genalign.config.schema import AlgorithmConfig
from genalign.policies.base import Policy, Rollout, ScoreRequest
from genalign.trainer.distributed import all_gather_cat, rank_and_world
from genalign.trainer.update import ScoredBatch, score_without_grad


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
    embeddings: Tensor | None = None,
    combiner_state: alg.CompetenceState | None = None,
) -> StepAdvantages:
    """Args: rewards ``[n, K]`` (NaN = not applicable), group_ids ``[n]`` globally unique, weights ``[K]``,
    kl_per_sample ``[n]`` (only with ``kl_placement == "reward"``), state: statistics of earlier steps for the
    estimators that use them (:func:`genalign.algorithms.make_advantage_state`), updated here, embeddings ``[n, H]``
    sequence embeddings for the reward shapers that need ``hidden``, combiner_state: the same for the reward
    combiners that use them (:func:`genalign.algorithms.make_combiner_state`), updated here."""
    rank, _ = rank_and_world()
    sizes = all_gather_cat(torch.tensor([rewards.shape[0]]))
    start = int(sizes[:rank].sum())
    stop = start + rewards.shape[0]
    all_rewards, all_groups = all_gather_cat(rewards), all_gather_cat(group_ids)  # [N, K], [N]
    combiner_args = combiner_state.hyperparameters() if combiner_state is not None else {}
    combined, stats = alg.REWARD_COMBINERS.get(cfg.reward_combination)(
        all_rewards, all_groups, weights, **(combiner_args | cfg.reward_combination_args)
    )  # [N]
    if combiner_state is not None:
        combiner_state.update(all_rewards)  # AFTER this step's combination
    if kl_per_sample is not None:
        combined = alg.kl_in_reward(combined, all_gather_cat(kl_per_sample), cfg.kl_coef)
    if cfg.reward_shaping:
        shaping = alg.ShapingInputs(all_groups, all_gather_cat(embeddings) if embeddings is not None else None)
        combined, shaping_stats = alg.apply_reward_shaping(cfg.reward_shaping_rules(), combined, shaping)  # [N]
        stats = {**stats, **shaping_stats}
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


def needs_rescored_old_logp(cfg: AlgorithmConfig, policy: Policy) -> bool:
    """The old log-probs must come from a scoring pass before the update: the objective reads them, the update takes
    more than one optimizer step per rollout, and the sampler's log-probs are not the current weights' (they are not
    exact, or, with asynchronous rollouts, they are exact but a stale behaviour policy's: the off-policy clip [323]
    centres its trust region on the current iterate and takes the ratio to the behaviour policy separately)."""
    uses_old_logp = alg.OBJECTIVES.meta(cfg.objective).get("uses_old_logp", True)
    stale_or_inexact = cfg.async_rollout.enabled or not policy.capabilities.rollout_logp_is_exact
    return uses_old_logp and not cfg.fully_on_policy and stale_or_inexact


def prepass_request(cfg: AlgorithmConfig, policy: Policy) -> ScoreRequest | None:
    """What the scoring pass before the update must compute, or None when no such pass is needed: old log-probs when
    the sampler's are not the current weights' and the update is not fully on-policy, entropy / KL for the credit rules, KL for
    KL-in-reward."""
    needs = rule_needs(cfg.credit) | alg.shaper_needs(cfg.reward_shaping)
    kl_in_reward = cfg.kl_coef > 0 and cfg.kl_placement == "reward"
    need_old = needs_rescored_old_logp(cfg, policy)
    features = needs & {
        "entropy", "kl", "logit_stats", "hidden", "logp_without_image", "logp_frames_shuffled", "visual_similarity"
    }  # fmt: skip
    if not (need_old or features or kl_in_reward):
        return None
    kl_estimator = "k1" if "kl" in needs else cfg.kl_estimator if kl_in_reward else None
    return ScoreRequest(
        entropy="entropy" in needs,
        kl_estimator=kl_estimator,
        logit_stats="logit_stats" in needs,
        hidden="hidden" in needs,
        logp_without_image="logp_without_image" in needs,
        logp_frames_shuffled="logp_frames_shuffled" in needs,
        visual_similarity="visual_similarity" in needs,
    )


def update_inputs(
    policy: Policy,
    rollout: Rollout,
    reward_table: Tensor,
    reward_weights: Tensor,
    cfg: AlgorithmConfig,
    state: alg.AdvantageState | None,
    progress: float,
    *,
    lockstep: bool = False,
    combiner_state: alg.CompetenceState | None = None,
) -> UpdateInputs:
    """Advantages and old log-probs for one rollout: an optional scoring pass without gradient
    (:func:`prepass_request`), group-relative advantages over the global batch, then the configured credit rules.

    Args:
        reward_table: ``[n, K]`` rewards of the rollout (NaN = not applicable); reward_weights: ``[K]``;
        progress: ``step / max_steps``.
        lockstep: every process makes the same number of scoring passes (sharded training).
        state, combiner_state: statistics of earlier steps of the advantage estimator and the reward combiner.
    """
    request = prepass_request(cfg, policy)
    prepass = ScoredBatch()
    if request is not None:
        prepass = score_without_grad(policy, rollout, cfg.micro_batch_size, request, lockstep=lockstep)
    kl_in_reward = cfg.kl_coef > 0 and cfg.kl_placement == "reward"
    kl_per_sample = (prepass.kl * rollout.action_mask).sum(1) if kl_in_reward else None  # [n]

    embeddings = None  # [n, H] mean hidden state over each completion, for reward shapers needing ``hidden``
    if prepass.hidden is not None and "hidden" in alg.shaper_needs(cfg.reward_shaping):
        mask = rollout.action_mask.to(prepass.hidden.device)[..., None]  # [n, T, 1]
        embeddings = (prepass.hidden.float() * mask).sum(1) / mask.sum(1).clamp_min(1.0)  # [n, H]
    adv = step_advantages(
        reward_table, rollout.group_ids, reward_weights, cfg, kl_per_sample, state, embeddings, combiner_state
    )
    inputs = alg.CreditInputs(
        sample_advantages=adv.advantages,
        mask=rollout.action_mask,
        group_ids=rollout.group_ids,
        behaviour_logp=rollout.old_logp,
        entropy=prepass.entropy,
        kl=prepass.kl,
        structure=rollout.structure,
        progress=progress,
        rewards=reward_table,
        logit_stats=prepass.logit_stats,
        hidden=prepass.hidden,
        logp_without_image=prepass.logp_without_image,
        logp_frames_shuffled=prepass.logp_frames_shuffled,
        visual_similarity=prepass.visual_similarity,
    )
    advantages = alg.apply_credit(cfg.credit_rules(), adv.advantages, inputs)  # [n] or [n, T]
    old_logp = None  # None: the update uses the detached current log-probs (ratio exactly 1)
    if needs_rescored_old_logp(cfg, policy):
        old_logp = prepass.logp
    elif not cfg.fully_on_policy and policy.capabilities.rollout_logp_is_exact:
        old_logp = rollout.old_logp  # synchronous: the sampler's weights are the current ones
    return UpdateInputs(adv, advantages, old_logp)
