"""Ratio levels over segments and prefixes (method catalogue): sentence-level ratios (SSPO [15]), prefix geometric means,
cumulative and minimum-prefix ratios."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import (
    RATIO_LEVELS,
    ClipFn,
    LevelOutput,
    action_positions,
    level_output,
)


# ------------------------------------------------------------------------------------------------------------ prefixes
@RATIO_LEVELS.register(
    "prefix_geometric",
    formula="w_it = exp(mean_{j≤t} ℓ_ij) = (Π_{j≤t} ρ_ij)^{1/t}, clipped per action",
    source="[21] PNPO",
    summary="Geometric mean of the ratios along the causal prefix of each action.",
)
def prefix_geometric_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch
) -> LevelOutput:
    """PNPO [21]: the weight of action ``t`` is the geometric mean of the likelihood ratios of its causal prefix,
    ``exp(mean_{j≤t} ℓ_j)``, which replaces the cumulative prefix ratio ``Π_{j≤t} ρ_j`` (its length-normalised form);
    the gradient flows to every prefix action. Clipped per action with the chosen clip form. Shapes ``[N, T]``."""
    prefix_mean = torch.cumsum(log_ratio * mask, 1) / action_positions(mask)  # [N, T]
    clipped = clip_fn(prefix_mean, advantages)
    return level_output(advantages, clipped.log_weight, prefix_mean, clipped)
