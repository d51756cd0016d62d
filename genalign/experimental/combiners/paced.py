"""Self-Paced GRPO [64]: a progressive reward combiner whose emphasis moves along the configured rewards (coarse
fidelity → temporal coherence → fine semantic alignment, in config order) as the generator's competence grows, and
the small state object that tracks that competence across steps.

Signature: :mod:`genalign.algorithms.reward_combiners`.
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


def stage_emphasis(competence: float, thresholds: Sequence[float], min_weight: float) -> Tensor:
    """``[K]`` emphasis of each stage: ``min_weight + (1 − min_weight) · max(0, 1 − |u − k|)`` where
    ``u = interp(competence, thresholds, 0 .. K−1)`` is the competence's position among the ``K`` increasing
    ``thresholds`` (stage ``k`` is fully emphasised at competence ``thresholds[k]``; clamped at both ends)."""
    points = torch.tensor([float(t) for t in thresholds], dtype=torch.float64)
    k = len(thresholds)
    if k == 1:
        return torch.ones(1, dtype=torch.float64)
    c = min(max(float(competence), float(points[0])), float(points[-1]))
    upper = int(torch.searchsorted(points, torch.tensor([c], dtype=torch.float64), right=True).clamp(1, k - 1))
    lo, hi = float(points[upper - 1]), float(points[upper])
    position = upper - 1 + (c - lo) / (hi - lo)
    emphasis = (1.0 - (torch.arange(k, dtype=torch.float64) - position).abs()).clamp_min(0.0)  # [K]
    return min_weight + (1.0 - min_weight) * emphasis


def _check_paced(k: int, thresholds: Sequence[float] | None, competence_reward: int, min_weight: float) -> list[float]:
    if thresholds is None:
        thresholds = [j / (k - 1) for j in range(k)] if k > 1 else [0.0]
    thresholds = [float(t) for t in thresholds]
    if len(thresholds) != k or any(b <= a for a, b in itertools.pairwise(thresholds)):
        raise ValueError(
            f"self_paced: thresholds={thresholds} must hold one strictly increasing competence value per reward "
            f"(K={k}); e.g. {[round(j / max(k - 1, 1), 3) for j in range(k)]}."
        )
    if not 0 <= competence_reward < k:
        raise ValueError(f"self_paced: competence_reward={competence_reward} must index a reward column (0..{k - 1}).")
    if not 0 <= min_weight <= 1:
        raise ValueError(f"self_paced: min_weight={min_weight} must be in [0, 1].")
    return thresholds


#: genalign's default EMA momentum of Self-Paced GRPO's running competence
COMPETENCE_MOMENTUM = 0.9


class SelfPaced:
    """:func:`self_paced` with its running competence: an exponential moving average of the batch mean of one reward
    column, ``c ← momentum · c + (1 − momentum) · mean(r_{:, competence_reward})`` (the first batch sets it), updated
    after each step's combination. A ``competence`` fixed in the config wins. Stateful (``state_dict`` holds plain
    floats): the trainer checkpoints it."""

    def __init__(
        self,
        *,
        competence: float | None = None,
        competence_reward: int = 0,
        competence_momentum: float = COMPETENCE_MOMENTUM,
        thresholds: Sequence[float] | None = None,
        min_weight: float = 0.1,
        names: Sequence[str] | None = None,
    ) -> None:
        if not 0 <= competence_momentum < 1:
            raise ValueError(f"self_paced: competence_momentum={competence_momentum!r} must be in [0, 1).")
        self.fixed: dict[str, Any] = {
            "competence_reward": competence_reward,
            "competence_momentum": competence_momentum,
        }
        self.fixed |= {"thresholds": thresholds, "min_weight": min_weight, "names": names}
        if competence is not None:
            self.fixed["competence"] = competence
        self.competence_reward, self.momentum = competence_reward, competence_momentum
        self.competence: float | None = None

    def __call__(self, rewards: Tensor, group_ids: Tensor, weights: Tensor | Sequence[float]):
        learned = {} if self.competence is None else {"competence": self.competence}
        return self_paced(rewards, group_ids, weights, **(learned | self.fixed))

    def update(self, rewards: Tensor, group_ids: Tensor | None = None) -> None:
        """Add one step's global rewards ``[N, K]`` (NaN ignored)."""
        column = rewards[:, self.competence_reward].detach().double()
        present = column[~torch.isnan(column)]
        if present.numel() == 0:
            return
        mean = float(present.mean())
        previous = self.competence
        self.competence = mean if previous is None else self.momentum * previous + (1 - self.momentum) * mean

    def state_dict(self) -> dict[str, Any]:
        return {"competence_reward": self.competence_reward, "momentum": self.momentum, "competence": self.competence}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.competence_reward, self.momentum = int(state["competence_reward"]), float(state["momentum"])
        self.competence = None if state["competence"] is None else float(state["competence"])


@REWARD_COMBINERS.register(
    "self_paced",
    bind=SelfPaced,
    formula="c = competence (running mean of reward c_r, or batch mean); u = interp(c, τ, 0..K−1); "
    "e_k = m + (1−m)·max(0, 1−|u−k|); r_i = Σ_k w_k e_k r_ik",
    source="[64] Self-Paced GRPO",
    summary="Weighted sum whose emphasis moves from the first reward to the last as a competence estimate rises "
    "(coarse fidelity → coherence → semantic alignment).",
)
def self_paced(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    competence: float | None = None,
    competence_reward: int = 0,
    competence_momentum: float = COMPETENCE_MOMENTUM,
    thresholds: Sequence[float] | None = None,
    min_weight: float = 0.1,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Self-Paced GRPO [64] progressive reward: the rewards, in config order, are stages of a curriculum; the weight of
    stage ``k`` is scaled by its emphasis :func:`stage_emphasis` at the current competence, so the signal shifts from
    the first reward (coarse fidelity) to the later ones (coherence, fine alignment) as the generator improves, while
    every reward keeps at least ``min_weight`` of its weight.

    Reading chosen: the abstract's competence-aware "progressive reward mechanism" is read as a triangular schedule over
    stages placed at increasing competence ``thresholds`` (default evenly spaced in ``[0, 1]``); competence is a
    running mean of reward ``competence_reward`` over the earlier steps (:class:`SelfPaced`, its bound form in training, which
    keeps it and is checkpointed with the run, passes it as ``competence``) or, when none is passed (the first step, or a direct call),
    that reward's mean over the batch. ``min_weight = 0.1`` and ``competence_momentum = 0.9`` are genalign's
    defaults.

    Args:
        rewards: ``[N, K]``, one column per reward (stage order); NaN = missing.
        group_ids: ``[N]`` (checked for shape).
        weights: ``[K]`` base weights.
        competence: the competence estimate (None: batch mean of the competence reward).
        competence_reward: column whose mean measures competence.
        competence_momentum: EMA momentum of the running competence (read by :class:`SelfPaced`).
        thresholds: ``K`` strictly increasing competence values, one per stage.
        min_weight: emphasis floor in ``[0, 1]``.
        names: reward names for ``stats``.
    Returns:
        ``(combined [N], stats)`` with ``self_paced/competence`` and ``self_paced/emphasis_<k>``.
    """
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    k = rewards.shape[1]
    thresholds = _check_paced(k, thresholds, competence_reward, min_weight)
    if not 0 <= competence_momentum < 1:
        raise ValueError(f"self_paced: competence_momentum={competence_momentum!r} must be in [0, 1).")
    if competence is None:
        column = rewards[:, competence_reward]
        present = column[~torch.isnan(column)]
        competence = float(present.mean()) if present.numel() else float(thresholds[0])
    emphasis = stage_emphasis(competence, thresholds, min_weight).to(rewards.dtype)  # [K]
    combined = weighted_nansum(rewards, weights * emphasis)  # [N]
    stats = reward_statistics(rewards, names) | {"self_paced/competence": float(competence)}
    return combined, stats | {f"self_paced/emphasis_{j}": float(e) for j, e in enumerate(emphasis)}
