"""The statistics that the estimators reading earlier steps keep (the registries stay pure functions).

Each store turns what it has seen into the float hyper-parameters of one estimator and is updated with the combined
rewards of each step; the registered estimators ``empirical_bayes``, ``smooth_standardized`` and
``momentum_augmented`` (:mod:`genalign.algorithms.advantages.difficulty`) hold one, and offer the state protocol
(``state_dict`` / ``load_state_dict``), so the trainer checkpoints them like every stateful option::

    estimator = bind_option(ADVANTAGE_ESTIMATORS, "empirical_bayes", {})   # values fixed in the config win
    advantages = estimator(combined, group_ids)                           # [N], with the prior learned so far
    estimator.update(combined, group_ids)                                  # AFTER the advantages of this step

``combined`` are the global (all-process) rewards ``[N]``, so every process holds the same state. Every store
ignores NaN (missing) rewards. State dicts hold plain floats and ints.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups


@dataclass
class RunningMoments:
    """Welford's online mean and variance of a stream of numbers.

    Attributes:
        count: numbers seen.
        mean: their mean.
        m2: sum of squared deviations from the mean.
    """

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def update(self, values: Tensor) -> None:
        """Add the finite entries of ``values`` (any shape), merging the batch with Chan et al.'s formula."""
        values = values.detach().double().flatten()
        values = values[torch.isfinite(values)]
        n = values.numel()
        if n == 0:
            return
        batch_mean = float(values.mean())
        batch_m2 = float((values - batch_mean).square().sum())
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.m2 += batch_m2 + delta * delta * self.count * n / total
        self.count = total

    @property
    def variance(self) -> float | None:
        """Population variance, or None before two numbers were seen."""
        return None if self.count < 2 else self.m2 / self.count

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self.m2 = int(state["count"]), float(state["mean"]), float(state["m2"])


@dataclass
class EmpiricalBayesPrior:
    """Global prior of the ``empirical_bayes`` estimator (EBPO [207]), updated online with Welford's algorithm.

    ``group_means`` tracks the means of groups with >= 2 valid rewards (``μ₀``, ``τ²``); ``within`` tracks their
    within-group population variances (its mean is the pooled ``σ²``).
    """

    group_means: RunningMoments = field(default_factory=RunningMoments)
    within: RunningMoments = field(default_factory=RunningMoments)

    def hyperparameters(self) -> dict[str, float]:
        """``prior_mean``, ``prior_var``, ``noise_var`` once known (an empty dict before 2 groups were seen)."""
        if self.group_means.count < 2:
            return {}
        return {
            "prior_mean": self.group_means.mean,
            "prior_var": float(self.group_means.variance),
            "noise_var": self.within.mean,
        }

    def update(self, rewards: Tensor, group_ids: Tensor) -> None:
        """Add one step's combined rewards ``[N]`` and their ``group_ids`` ``[N]``."""
        stats = group_stats(
            rewards.detach().double()[:, None], make_groups(group_ids, rewards.shape[0]), unbiased=False
        )
        usable = stats.count[:, 0] >= 2  # [G]
        self.group_means.update(stats.mean[usable, 0])
        self.within.update(stats.std[usable, 0].square())

    def state_dict(self) -> dict[str, dict[str, float]]:
        return {"group_means": self.group_means.state_dict(), "within": self.within.state_dict()}

    def load_state_dict(self, state: dict[str, dict[str, float]]) -> None:
        self.group_means.load_state_dict(state["group_means"])
        self.within.load_state_dict(state["within"])


@dataclass
class RewardHistory:
    """Reward statistics of earlier steps for ``smooth_standardized`` (DCPO [189]) and ``momentum_augmented``
    (AAPO [228]): cumulative mean/std of every reward (Welford) and an exponential moving average of batch means.

    Attributes:
        momentum: EMA factor in ``[0, 1)``: ``m ← momentum·m + (1 − momentum)·batch_mean``.
        moments: cumulative moments of all rewards seen.
        ema: the moving average, None before the first update.
    """

    momentum: float = 0.9
    moments: RunningMoments = field(default_factory=RunningMoments)
    ema: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")

    def hyperparameters(self, estimator: str) -> dict[str, float]:
        """The keywords of ``estimator`` (``smooth_standardized`` or ``momentum_augmented``) known so far."""
        if estimator == "smooth_standardized":
            variance = self.moments.variance
            return {} if variance is None else {"history_mean": self.moments.mean, "history_std": math.sqrt(variance)}
        if estimator == "momentum_augmented":
            return {} if self.ema is None else {"momentum_mean": self.ema}
        raise ValueError(f"estimator must be 'smooth_standardized' or 'momentum_augmented', got {estimator!r}")

    def update(self, rewards: Tensor, group_ids: Tensor | None = None) -> None:
        """Add one step's combined rewards ``[N]`` (``group_ids`` unused, accepted for a uniform call)."""
        finite = rewards.detach().double()[torch.isfinite(rewards.detach())]
        if finite.numel() == 0:
            return
        self.moments.update(finite)
        batch_mean = float(finite.mean())
        self.ema = batch_mean if self.ema is None else self.momentum * self.ema + (1 - self.momentum) * batch_mean

    def state_dict(self) -> dict:
        return {"momentum": self.momentum, "moments": self.moments.state_dict(), "ema": self.ema}

    def load_state_dict(self, state: dict) -> None:
        self.momentum, self.ema = float(state["momentum"]), state["ema"]
        self.moments.load_state_dict(state["moments"])
