"""The step-level importance ratio of multi-turn rollouts (StepPO [7]), a ratio level of
:data:`~genalign.algorithms.ratio_levels.base.RATIO_LEVELS`."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import RATIO_LEVELS, ClipFn, LevelOutput, level_output, segment_mean


@RATIO_LEVELS.register(
    "turn",
    needs=("turn_ids",),
    formula="s_{i,k} = exp(mean_{t∈turn k} ℓ_it) over the model actions of turn k, clipped per turn and placed on the "
    "turn's actions",
    source="[7] StepPO (step-level MDP: one ratio per interaction step)",
    summary="One importance ratio per interaction step (model turn) of a multi-turn rollout, between the token ratio "
    "and the sequence ratio.",
)
def turn_level(log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch) -> LevelOutput:
    """StepPO [7] reformulates agentic RL as a step-level MDP whose actions are interaction steps, and optimises the
    policy at that granularity: the probability ratio of an action is the ratio of the whole step.

    Reading chosen: the steps are the rollout's model turns (``turn_ids``); the step ratio is the length-normalised
    one of GSPO applied inside each turn, ``exp(mean_{t∈k} ℓ_t)`` (the product of the token ratios would over- or
    underflow on long turns), clipped once per turn with the chosen clip form, so a turn is kept or cut as a whole.
    Environment tokens have mask 0 and do not enter the mean. Called without ``turn_ids`` in the batch (direct use on
    single-turn completions) each completion is one step, the sequence level. Shapes ``[N, T]``.
    """
    turns = batch.get("turn_ids") if batch is not None else None
    turns = torch.zeros_like(mask, dtype=torch.long) if turns is None else turns.long().to(log_ratio.device)  # [N, T]
    step = segment_mean(log_ratio, mask, turns)  # [N, T]
    clipped = clip_fn(step, advantages)
    return level_output(advantages, clipped.log_weight, step, clipped)
