"""MedLoc-R1 [121]: a reward criterion that tightens with the model's readiness. One score column (an IoU) is turned
into the current stage's reward, dense at first, then thresholded ever more strictly; a sliding-window tracker of the
stage's success moves to the next stage when several conditions hold (a stateful reward combiner of
:data:`REWARD_COMBINERS`). Signature: :mod:`genalign.algorithms.reward_combiners`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.reward_combiners import (
    REWARD_COMBINERS,
    check_combiner_inputs,
    reward_statistics,
    weighted_nansum,
)


def stage_thresholds(thresholds: Sequence[float], dense_start: bool) -> list[float | None]:
    """The criterion of each stage in order: None for the dense stage (the score itself), else an IoU threshold."""
    values = [float(t) for t in thresholds]
    if not values and not dense_start:
        raise ValueError("tightening_threshold: give at least one threshold or dense_start=true.")
    if any(not 0.0 < t <= 1.0 for t in values) or any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"tightening_threshold: thresholds={values} must increase strictly within (0, 1], e.g. "
                         "[0.3, 0.5, 0.75].")  # fmt: skip
    return ([None] if dense_start else []) + values


def stage_reward(score: Tensor, threshold: float | None) -> Tensor:
    """The stage's reward of ``score`` ``[N]`` (NaN kept): the score itself (dense stage) or ``1[score >= τ]``."""
    if threshold is None:
        return score
    return torch.where(torch.isnan(score), torch.nan, (score >= threshold).to(score.dtype))


class TighteningTracker:
    """The sliding-window performance tracker and its multi-condition update rule.

    The stage's batch success (the mean of its reward over the valid samples) of each step enters a window of the
    last ``window`` steps at this stage. The next stage starts when (1) the window is full, (2) its mean is at least
    ``advance_at`` and (3) it is stable, ``max − min <= max_spread``; the window then starts empty. The last stage
    stays. Stateful (``state_dict``: the stage and the window, plain values): the trainer checkpoints it.
    """

    def __init__(self, *, stages: int, window: int, advance_at: float, max_spread: float) -> None:
        self.stages, self.window, self.advance_at, self.max_spread = stages, window, advance_at, max_spread
        self.stage = 0
        self.history: list[float] = []

    def observe(self, success: float) -> bool:
        """Add one step's success; returns whether the stage advanced."""
        self.history = [*self.history, success][-self.window :]
        full = len(self.history) == self.window
        ready = full and sum(self.history) / self.window >= self.advance_at
        stable = full and max(self.history) - min(self.history) <= self.max_spread
        if ready and stable and self.stage < self.stages - 1:
            self.stage += 1
            self.history = []
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stage, self.history = int(state["stage"]), [float(v) for v in state["history"]]


class TighteningThreshold:
    """:func:`tightening_threshold` with its tracker: each step's rewards are combined at the tracker's stage (a
    ``stage`` fixed in the config wins), then the stage's success is observed."""

    def __init__(
        self,
        *,
        score_column: int = 0,
        thresholds: Sequence[float] = (0.3, 0.5, 0.75),
        dense_start: bool = True,
        stage: int | None = None,
        window: int = 10,
        advance_at: float = 0.6,
        max_spread: float = 0.2,
        names: Sequence[str] | None = None,
    ) -> None:
        criteria = stage_thresholds(thresholds, dense_start)
        if window < 1 or not 0.0 <= advance_at <= 1.0 or max_spread < 0:
            raise ValueError(f"tightening_threshold: need window >= 1, advance_at in [0, 1] and max_spread >= 0; got "
                             f"{window!r}, {advance_at!r}, {max_spread!r}.")  # fmt: skip
        if stage is not None and not 0 <= stage < len(criteria):
            raise ValueError(f"tightening_threshold: stage={stage!r} must be one of the {len(criteria)} stages "
                             f"(0..{len(criteria) - 1}) or null (tracked).")  # fmt: skip
        self.fixed_stage, self.score_column, self.names = stage, score_column, names
        self.thresholds, self.dense_start = list(thresholds), dense_start
        self.tracker = TighteningTracker(stages=len(criteria), window=window, advance_at=advance_at,
                                         max_spread=max_spread)  # fmt: skip
        self.criteria = criteria

    @property
    def stage(self) -> int:
        return self.tracker.stage if self.fixed_stage is None else self.fixed_stage

    def __call__(self, rewards: Tensor, group_ids: Tensor, weights: Tensor | Sequence[float]):
        return combine_at_stage(rewards, group_ids, weights, score_column=self.score_column,
                                threshold=self.criteria[self.stage], stage=self.stage, names=self.names)  # fmt: skip

    def update(self, rewards: Tensor, group_ids: Tensor | None = None) -> None:
        """Observe the success of one step's global rewards ``[N, K]`` at the current stage (NaN ignored)."""
        score = rewards[:, self.score_column].detach().double()
        reward = stage_reward(score, self.criteria[self.tracker.stage])
        present = reward[~torch.isnan(reward)]
        if present.numel():
            self.tracker.observe(float(present.mean()))

    def state_dict(self) -> dict[str, Any]:
        return self.tracker.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tracker.load_state_dict(state)


def combine_at_stage(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    score_column: int,
    threshold: float | None,
    stage: int,
    names: Sequence[str] | None,
) -> tuple[Tensor, dict[str, float]]:
    """The weighted sum with column ``score_column`` replaced by its reward at a stage of criterion ``threshold``."""
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    if not -rewards.shape[1] <= score_column < rewards.shape[1]:
        raise ValueError(f"tightening_threshold: score_column={score_column} is not one of the {rewards.shape[1]} "
                         "rewards (0-based); give the position of the IoU (or other score) reward.")  # fmt: skip
    staged = rewards.clone()
    staged[:, score_column] = stage_reward(rewards[:, score_column], threshold)
    combined = weighted_nansum(staged, weights)  # [N]
    stats = reward_statistics(rewards, names) | {
        "tightening/stage": float(stage),
        "tightening/threshold": 0.0 if threshold is None else float(threshold),
    }
    return combined, stats


@REWARD_COMBINERS.register(
    "tightening_threshold",
    bind=TighteningThreshold,
    formula="u = reward column c (an IoU); stage k's reward s_k(u) = u (dense stage) or 1[u ≥ τ_k]; r_i = Σ_{j≠c} "
    "w_j r_ij + w_c·s_k(u_i); k → k+1 when the last W steps' mean of s_k is ≥ a and their max − min ≤ δ",
    source="[121] MedLoc-R1",
    summary="Performance-aware reward scheduling: the localisation reward starts dense and its IoU criterion "
    "tightens stage by stage once a sliding window of the model's success is high and stable.",
)
def tightening_threshold(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    score_column: int = 0,
    thresholds: Sequence[float] = (0.3, 0.5, 0.75),
    dense_start: bool = True,
    stage: int | None = None,
    window: int = 10,
    advance_at: float = 0.6,
    max_spread: float = 0.2,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """MedLoc-R1 [121]: fixed IoU-threshold rewards are too sparse early on (small, ambiguous regions are rarely hit,
    gradients vanish) and too lax later. The reward criterion is instead scheduled by the model's readiness: from
    dense, easily obtained signals to stricter localisation requirements, with no extra network or gradient path.

    Column ``score_column`` holds a score in ``[0, 1]`` (``box_iou``); at stage ``k`` it is replaced in the weighted
    sum by ``s_k(u)``: the score itself at the dense first stage (``dense_start``), then ``1[u ≥ τ_k]`` for the
    increasing ``thresholds``. The tracker (:class:`TighteningTracker`) keeps the stage's batch success over a
    sliding window of ``W`` steps and advances when the window is full, its mean reaches ``advance_at`` and it is
    stable (spread at most ``max_spread``).

    Reading chosen: the abstract names the tracker and "a multi-condition update rule" without the conditions or the
    schedule; the three conditions, the stages and their defaults (dense, 0.3, 0.5, 0.75; ``W = 10``, ``a = 0.6``,
    ``δ = 0.2``) are genalign's. Called directly, the function combines at ``stage`` (None: the first); in training
    the bound :class:`TighteningThreshold` tracks the stage and is checkpointed with the run (a ``stage`` in the config
    pins it).

    Args:
        rewards: ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` (checked for shape).
        weights: ``[K]`` reward weights (the score column's weighs its staged reward).
        score_column: the reward column of the score.
        thresholds: strictly increasing criteria in ``(0, 1]``.
        dense_start: the first stage uses the score itself.
        stage: a fixed stage (0-based over the dense stage and the thresholds), or None (tracked).
        window: ``W >= 1`` steps; advance_at: ``a`` in ``[0, 1]``; max_spread: ``δ >= 0``.
        names: reward names for ``stats``.
    Returns:
        ``(combined [N], stats)`` with ``tightening/stage`` and ``tightening/threshold`` (0 at the dense stage).
    """
    bound = TighteningThreshold(score_column=score_column, thresholds=thresholds, dense_start=dense_start,
                                stage=stage, window=window, advance_at=advance_at, max_spread=max_spread,
                                names=names)  # fmt: skip
    return bound(rewards, group_ids, weights)
