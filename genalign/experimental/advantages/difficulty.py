"""Difficulty- and history-aware advantage estimators whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from genalign.algorithms._groups import (
    batch_stats,
    group_stats,
)
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps, finish, prepare
from genalign.algorithms.advantages.state import EmpiricalBayesPrior, RewardHistory


@ADVANTAGE_ESTIMATORS.register(
    "noise_aware",
    formula="A_i = w_G·(r_i − mean_G), w_G = max(0, 1 − η(1−η)/σ_G²) (σ_G² population variance); optional / std_G",
    source="[80] S-GRPO",
    summary="Noise-aware advantage weights: groups whose spread is mostly reward noise are down-weighted.",
)
def noise_aware(
    rewards: Tensor, group_ids: Tensor, *, noise_rate: float = 0.1, scale_by_std: bool = False, eps: float = 1e-6
) -> Tensor:
    """Noise-aware advantage weights of S-GRPO [80], against rewards flipped with probability ``η`` (Think-Answer
    Mismatch), which hurts unbalanced groups most.

    Reading chosen (the abstract gives no formula): for 0/1 rewards flipped with rate ``η`` the observed group
    variance is ``σ̃² = (1−2η)²σ² + η(1−η)``, so the share of it that is signal is ``w = 1 − η(1−η)/σ̃²`` (a Wiener
    weight, clamped at 0): balanced groups keep most of their advantage, unbalanced ones (a single success among
    many failures, likely a flipped label) lose it. Centred like Dr. GRPO (S-GRPO's baseline); ``scale_by_std``
    divides by the group std as GRPO.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        noise_rate: ``η`` in ``[0, 0.5)``.
        scale_by_std: also divide by ``std_G + eps``.
        eps: added to the std when ``scale_by_std``.
    """
    if not 0 <= noise_rate < 0.5:
        raise ValueError(f"noise_rate must be in [0, 0.5) (probability a reward is flipped), got {noise_rate!r}")
    check_eps(eps)
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=False)
    variance = stats.std.square()  # [G, K]
    weight = torch.where(variance > 0, (1.0 - noise_rate * (1 - noise_rate) / variance.clamp_min(1e-12)), 0.0)
    weight = weight.clamp_min(0.0)  # [G, K]
    advantages = weight[groups.index] * (columns - stats.mean[groups.index])  # [N, K]
    if scale_by_std:
        advantages = advantages / (group_stats(columns, groups, unbiased=True).std[groups.index] + eps)
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "zero_variance_direct",
    formula="mixed groups: GRPO; constant groups: A_i = +α if r_i ≥ threshold else −α",
    source="[211] RL-ZVP",
    summary="Keep zero-variance groups: reward their correctness and penalise their errors directly.",
)
def zero_variance_direct(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    zero_variance_scale: float = 0.1,
    success_threshold: float = 0.5,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> Tensor:
    """RL-ZVP [211]: a group whose rewards all agree is not filtered out; each of its samples gets a direct signal,
    ``+α`` when correct (``r >= threshold``) and ``−α`` otherwise. Other groups use GRPO.

    Reading chosen: a constant ``α`` (RL-ZVP modulates it with token-level characteristics it does not specify; for
    that, compose with ``credit: entropy_weighted``). Do not combine with ``drop_zero_std_groups``.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        zero_variance_scale: ``α >= 0``.
        success_threshold: rewards at or above count as correct.
        eps: added to the group std (mixed groups).
        unbiased_std: ``n − 1`` (True) or ``n`` (False).
    """
    if not zero_variance_scale >= 0:
        raise ValueError(f"zero_variance_scale must be >= 0, got {zero_variance_scale!r}")
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    mixed = (columns - stats.mean[groups.index]) / (stats.std[groups.index] + eps)  # [N, K]
    scale = torch.full_like(columns, zero_variance_scale)  # [N, K]
    direct = torch.where(columns >= success_threshold, scale, -scale)  # [N, K]
    advantages = torch.where(stats.constant[groups.index], direct, mixed)
    return finish(advantages, columns, groups, stats, rewards)


class _WithHistory:
    """An estimator that reads statistics of earlier steps: the pure function with the statistics learned so far as
    its hyper-parameters (values fixed in the config win), updated with each step's combined rewards after its
    advantages are computed. Stateful (``state_dict`` / ``load_state_dict``): the trainer checkpoints it."""

    estimator: str

    def __init__(self, store: EmpiricalBayesPrior | RewardHistory, fixed: dict[str, Any]) -> None:
        self.store = store
        self.fixed = {key: value for key, value in fixed.items() if value is not None}

    def learned(self) -> dict[str, float]:
        return self.store.hyperparameters()

    def compute(self, rewards: Tensor, group_ids: Tensor, **hp: Any) -> Tensor:
        raise NotImplementedError

    def __call__(self, rewards: Tensor, group_ids: Tensor) -> Tensor:
        return self.compute(rewards, group_ids, **(self.learned() | self.fixed))

    def update(self, rewards: Tensor, group_ids: Tensor) -> None:
        """Add one step's global combined rewards ``[N]`` (after this step's advantages)."""
        self.store.update(rewards, group_ids)

    def state_dict(self) -> dict[str, Any]:
        return {"estimator": self.estimator, "store": self.store.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["estimator"] != self.estimator:
            raise ValueError(
                f"advantage state was saved for estimator {state['estimator']!r} but the config uses "
                f"{self.estimator!r}; resume with the same algorithm.advantage"
            )
        self.store.load_state_dict(state["store"])


class EmpiricalBayes(_WithHistory):
    """:func:`empirical_bayes` with its prior (``prior_mean``, ``prior_var``, ``noise_var``) learned online from the
    groups of earlier steps (:class:`~genalign.algorithms.advantages.state.EmpiricalBayesPrior`)."""

    estimator = "empirical_bayes"

    def compute(self, rewards: Tensor, group_ids: Tensor, **hp: Any) -> Tensor:
        return empirical_bayes(rewards, group_ids, **hp)

    def __init__(
        self,
        *,
        prior_mean: float | None = None,
        prior_var: float | None = None,
        noise_var: float | None = None,
        normalize: bool = True,
        eps: float = 1e-6,
    ) -> None:
        fixed = {"prior_mean": prior_mean, "prior_var": prior_var, "noise_var": noise_var}
        super().__init__(EmpiricalBayesPrior(), fixed | {"normalize": normalize, "eps": eps})


class SmoothStandardized(_WithHistory):
    """:func:`smooth_standardized` with ``history_mean`` / ``history_std`` the cumulative statistics of every earlier
    reward (:class:`~genalign.algorithms.advantages.state.RewardHistory`)."""

    estimator = "smooth_standardized"

    def compute(self, rewards: Tensor, group_ids: Tensor, **hp: Any) -> Tensor:
        return smooth_standardized(rewards, group_ids, **hp)

    def __init__(
        self,
        *,
        history_mean: float | None = None,
        history_std: float | None = None,
        smoothing: float = 0.5,
        eps: float = 1e-6,
        unbiased_std: bool = True,
    ) -> None:
        fixed = {"history_mean": history_mean, "history_std": history_std, "smoothing": smoothing, "eps": eps}
        super().__init__(RewardHistory(), fixed | {"unbiased_std": unbiased_std})

    def learned(self) -> dict[str, float]:
        return self.store.hyperparameters("smooth_standardized")


class MomentumAugmented(_WithHistory):
    """:func:`momentum_augmented` with ``momentum_mean`` an exponential moving average of earlier batch mean rewards
    (:class:`~genalign.algorithms.advantages.state.RewardHistory`, momentum 0.9)."""

    estimator = "momentum_augmented"

    def compute(self, rewards: Tensor, group_ids: Tensor, **hp: Any) -> Tensor:
        return momentum_augmented(rewards, group_ids, **hp)

    def __init__(
        self,
        *,
        momentum_mean: float | None = None,
        momentum_gain: float = 0.5,
        eps: float = 1e-6,
        unbiased_std: bool = True,
    ) -> None:
        fixed = {"momentum_mean": momentum_mean, "momentum_gain": momentum_gain, "eps": eps}
        super().__init__(RewardHistory(), fixed | {"unbiased_std": unbiased_std})

    def learned(self) -> dict[str, float]:
        return self.store.hyperparameters("momentum_augmented")


@ADVANTAGE_ESTIMATORS.register(
    "empirical_bayes",
    bind=EmpiricalBayes,
    formula="b_G = (1−λ_G)·mean_G + λ_G·μ₀, λ_G = (σ²/n_G)/(σ²/n_G + τ²); A_i = (r_i − b_G)/(σ + eps)",
    source="[207] EBPO",
    summary="Shrinkage baseline between the group mean and a global prior (μ₀, τ²) updated online (Welford).",
)
def empirical_bayes(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    prior_mean: float | None = None,
    prior_var: float | None = None,
    noise_var: float | None = None,
    normalize: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Empirical-Bayes baseline of EBPO [207]: the group mean is shrunk towards a global prior mean ``μ₀`` with the
    normal-normal posterior weight ``λ_G = (σ²/n_G) / (σ²/n_G + τ²)`` (``σ²``: within-group reward variance, pooled;
    ``τ²``: variance of the prompt means). A group where every response fails keeps a negative advantage
    (``b_G = λ_G μ₀ > 0``), the non-vanishing penalty of the abstract; small groups lean more on the prior.

    ``prior_mean`` / ``prior_var`` / ``noise_var`` come from :class:`genalign.algorithms.advantages.state.EmpiricalBayesPrior`
    (Welford over earlier steps); each one left None is estimated from the current batch (mean and variance of its
    group means; mean within-group population variance). Reading chosen: pooled ``σ²`` (not per group, which would
    vanish for a constant group) and scaling by the pooled ``σ`` (``normalize``).

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        prior_mean: ``μ₀``, or None (batch).
        prior_var: ``τ² >= 0``, or None (batch).
        noise_var: ``σ² >= 0``, or None (batch).
        normalize: divide by ``√σ² + eps``.
        eps: added to ``σ``.
    """
    for name, value in (("prior_var", prior_var), ("noise_var", noise_var)):
        if value is not None and not value >= 0:
            raise ValueError(f"{name} must be >= 0 or None (estimate from the batch), got {value!r}")
    check_eps(eps)
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=False)
    has_baseline = stats.count >= 2  # [G, K]
    mean_of_means, std_of_means = batch_stats(stats.mean, has_baseline, unbiased=False)  # [K]
    within = torch.where(has_baseline, stats.std.square(), 0.0).sum(0) / has_baseline.sum(0).clamp_min(1)  # [K]
    mu0 = mean_of_means if prior_mean is None else torch.full_like(mean_of_means, prior_mean)
    tau2 = std_of_means.square() if prior_var is None else torch.full_like(mean_of_means, prior_var)
    sigma2 = within if noise_var is None else torch.full_like(within, noise_var)
    noise_of_mean = sigma2 / stats.count.clamp_min(1.0)  # [G, K]
    total = noise_of_mean + tau2  # [G, K]
    shrink = torch.where(total > 0, noise_of_mean / total.clamp_min(1e-12), 0.0)  # [G, K] λ
    baseline = (1.0 - shrink) * stats.mean + shrink * mu0  # [G, K]
    advantages = columns - baseline[groups.index]  # [N, K]
    if normalize:
        advantages = advantages / (sigma2.sqrt() + eps)
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "smooth_standardized",
    bind=SmoothStandardized,
    formula="μ̃ = (1−w)·mean_G + w·μ_hist, σ̃ = (1−w)·std_G + w·σ_hist; A_i = (r_i − μ̃)/(σ̃ + eps)",
    source="[189] DCPO (smooth advantage standardisation)",
    summary="Standardise with group statistics smoothed by reward statistics accumulated over training steps.",
)
def smooth_standardized(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    history_mean: float | None = None,
    history_std: float | None = None,
    smoothing: float = 0.5,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> Tensor:
    """Smooth advantage standardisation of DCPO [189]: the group mean and std are mixed with statistics of the rewards
    of all earlier steps, so a group whose rewards all agree still gets ``w(r − μ_hist)/(σ̃ + eps) ≠ 0`` and the share
    of non-zero advantages rises.

    Reading chosen: a convex mix with weight ``w`` of group and cumulative (global, not per-prompt: the trainer's
    group ids are not stable across steps) statistics; ``history_*`` come from
    :class:`genalign.algorithms.advantages.state.RewardHistory` and default to the current batch's.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        history_mean: mean of all earlier rewards, or None (batch).
        history_std: std of all earlier rewards (>= 0), or None (batch).
        smoothing: ``w`` in ``[0, 1]`` (0 = GRPO).
        eps: added to the mixed std.
        unbiased_std: ``n − 1`` (True) or ``n`` (False) for the group std.
    """
    if not 0 <= smoothing <= 1:
        raise ValueError(f"smoothing must be in [0, 1] (0 = GRPO), got {smoothing!r}")
    if history_std is not None and not history_std >= 0:
        raise ValueError(f"history_std must be >= 0 or None, got {history_std!r}")
    check_eps(eps)
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    batch_mean, batch_std = batch_stats(columns, ~torch.isnan(columns), unbiased=unbiased_std)  # [K]
    mu = batch_mean if history_mean is None else torch.full_like(batch_mean, history_mean)
    sigma = batch_std if history_std is None else torch.full_like(batch_std, history_std)
    mean = (1.0 - smoothing) * stats.mean + smoothing * mu  # [G, K]
    std = (1.0 - smoothing) * stats.std + smoothing * sigma  # [G, K]
    advantages = (columns - mean[groups.index]) / (std[groups.index] + eps)  # [N, K]
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "momentum_augmented",
    bind=MomentumAugmented,
    formula="A_i = (r_i − mean_G)/(std_G + eps) + β·(r_i − m), m = EMA of earlier batch mean rewards",
    source="[228] AAPO",
    summary="GRPO advantage plus a momentum term, so learning continues where the group advantage is ~0.",
)
def momentum_augmented(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    momentum_mean: float | None = None,
    momentum_gain: float = 0.5,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> Tensor:
    """Advantage augmentation of AAPO [228]: the group-relative advantage plus ``β(r_i − m)`` where ``m`` is a
    momentum (exponential moving average) estimate of the reward from earlier steps; a group whose rewards all agree
    still moves when its reward differs from what the policy used to get.

    Reading chosen: a global EMA of batch mean rewards (:class:`genalign.algorithms.advantages.state.RewardHistory` supplies
    ``momentum_mean``; None uses the current batch mean, which makes the term a batch-mean baseline); AAPO's
    cross-entropy form is the usual ``−A·logπ`` surrogate here.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        momentum_mean: ``m``, or None (batch mean).
        momentum_gain: ``β >= 0``.
        eps: added to the group std.
        unbiased_std: ``n − 1`` (True) or ``n`` (False).
    """
    if not momentum_gain >= 0:
        raise ValueError(f"momentum_gain must be >= 0, got {momentum_gain!r}")
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    batch_mean, _ = batch_stats(columns, ~torch.isnan(columns), unbiased=unbiased_std)  # [K]
    m = batch_mean if momentum_mean is None else torch.full_like(batch_mean, momentum_mean)
    relative = torch.where(
        stats.constant[groups.index], 0.0, (columns - stats.mean[groups.index]) / (stats.std[groups.index] + eps)
    )  # [N, K]
    advantages = relative + momentum_gain * (columns - m)  # [N, K]
    return finish(advantages, columns, groups, stats, rewards)
