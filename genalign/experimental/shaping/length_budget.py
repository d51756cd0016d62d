"""A token budget that starts generous and tightens over training, inside the reward (curriculum length-controlled
GRPO [176]): a reward shaper of :data:`REWARD_SHAPERS` (experimental tier)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS

Schedule = Literal["linear", "exponential"]


def token_budget(progress: float, *, start: float, end: float, decay_until: float, schedule: Schedule) -> float:
    """The budget ``B`` at training ``progress`` in ``[0, 1]``: ``start`` until progress 0, ``end`` from
    ``decay_until`` on; in between linear (``start + (end − start)·u``) or exponential (``start·(end/start)^u``) in
    ``u = progress / decay_until``."""
    u = 1.0 if decay_until <= 0 else min(max(progress / decay_until, 0.0), 1.0)
    if schedule == "linear":
        return start + (end - start) * u
    return start * (end / start) ** u


def length_efficiency(lengths: Tensor, budget: float) -> Tensor:
    """``[N]`` ``clamp(1 − L_i/B, −1, 1)``: 1 for an empty completion, 0 at the budget, −1 at twice the budget or
    beyond (``lengths`` ``[N]``)."""
    return (1.0 - lengths / budget).clamp(-1.0, 1.0)


@REWARD_SHAPERS.register(
    "length_budget_curriculum",
    needs=("progress",),
    formula="B(p) = B₀ → B₁ (linear or exponential in p/p_end); e_i = clamp(1 − |o_i|/B(p), −1, 1); "
    "r̃_i = r_i + w·e_i (only for r_i ≥ min_reward when set)",
    source="[176] curriculum length-controlled GRPO (decaying token budget)",
    summary="A length-efficiency term measured against a token budget that starts generous and tightens over "
    "training: explore first, then compress the reasoning.",
)
def length_budget_curriculum(
    rewards: Tensor,
    batch: StepBatch,
    *,
    budget_start: float = 512.0,
    budget_end: float = 128.0,
    decay_until: float = 1.0,
    schedule: Schedule = "exponential",
    weight: float = 0.5,
    min_reward: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Curriculum length control [176]: a fixed training budget forces concise reasoning before the model has found a
    strategy; this budget starts generous (``budget_start`` actions) and shrinks with training progress to
    ``budget_end`` (reached at progress ``decay_until``), so the model first discovers solutions and then distils
    them into shorter traces. The shaped reward adds ``w·e_i``, the sample's length efficiency against the current
    budget, to the combined reward (correctness and format come from the configured reward functions and their
    weights: the abstract's three-signal reward).

    Reading chosen: the abstract gives neither the efficiency term nor the decay; genalign takes
    ``e = clamp(1 − L/B, −1, 1)`` (a bonus below the budget, a penalty above it, bounded) and an exponential decay by
    default (``linear`` on request), with lengths counted in actions (tokens). ``min_reward`` restricts the term to
    samples whose combined reward reaches it (e.g. correct ones), so a short wrong answer earns nothing.

    Args:
        rewards: ``[N]`` combined rewards; NaN = missing (stays NaN).
        batch: reads ``mask`` ``[N, T]`` (lengths) and ``progress``.
        budget_start, budget_end: the budget at the start and at the end of the decay (actions, > 0).
        decay_until: progress in ``[0, 1]`` at which the budget reaches ``budget_end``.
        schedule: ``linear`` or ``exponential``.
        weight: ``w >= 0``.
        min_reward: apply the term only where the reward is at least this (None: everywhere).
    Returns:
        ``(shaped rewards [N], {"reward_shaping/token_budget", "reward_shaping/length_efficiency_mean"})``.
    """
    if not (budget_start > 0 and budget_end > 0 and 0 <= decay_until <= 1 and weight >= 0):
        raise ValueError(
            "need budget_start > 0, budget_end > 0, decay_until in [0, 1] and weight >= 0, got "
            f"{budget_start!r}, {budget_end!r}, {decay_until!r}, {weight!r}"
        )
    if schedule not in ("linear", "exponential"):
        raise ValueError(f"schedule={schedule!r} must be 'linear' or 'exponential'")
    rewards = check_float_tensor(rewards, "rewards", "[N]")
    progress = float(batch.require("progress", "reward shaper 'length_budget_curriculum'"))
    budget = token_budget(progress, start=budget_start, end=budget_end, decay_until=decay_until, schedule=schedule)
    lengths = batch.mask.to(rewards.device, rewards.dtype).sum(1)  # [N]
    efficiency = length_efficiency(lengths, budget)  # [N]
    applies = torch.ones_like(rewards, dtype=torch.bool) if min_reward is None else rewards >= min_reward  # [N]
    shaped = torch.where(applies, rewards + weight * efficiency, rewards)  # [N]; NaN stays NaN
    mean = float(efficiency[applies].mean()) if bool(applies.any()) else math.nan
    return shaped, {"reward_shaping/token_budget": budget, "reward_shaping/length_efficiency_mean": mean}
