"""The phase-level importance ratio of Factorized GRPO [303]: one sequence-level ratio per phase (text block) of a
completion, a ratio level of :data:`~genalign.algorithms.ratio_levels.base.RATIO_LEVELS`."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import RATIO_LEVELS, ClipFn, LevelOutput, level_output, segment_mean


@RATIO_LEVELS.register(
    "phase",
    needs=("block_ids",),
    formula="s_{i,b} = exp(mean_{t∈phase b} ℓ_it), phase b = text block of the completion (block_ids), clipped per "
    "phase and placed on its actions",
    source="[303] F-GRPO (two-phase sequence-level objective; with the credit rule role_segments for the phases' "
    "own advantages)",
    summary="One sequence-level importance ratio per phase of a completion (e.g. candidate generation, then "
    "ranking), so each phase is kept or clipped as a whole under its own advantage.",
)
def phase_level(log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch) -> LevelOutput:
    """Factorized GRPO [303] factorises one rollout into phases, candidate generation then ranking, and optimises them
    with a *two-phase sequence-level objective*: each phase is one action with its own sequence-level (GSPO-style,
    length-normalised) ratio ``exp(mean_{t∈b} ℓ_t)``, clipped once, and its own group-relative advantage. The phases
    are the completion's text blocks (``block_ids``, split at ``policy.probes.block_markers``, e.g. the marker that
    opens the ranking); give each phase its own advantage with the credit rule ``role_segments`` (one role per
    phase, each with its reward columns: the coverage reward for generation, the ranking utility for ranking).

    Reading chosen: the abstract gives "separate group-relative advantages ... within a two-phase sequence-level
    objective" without the ratio; the length-normalised phase ratio is GSPO's form applied per phase (as the
    ``turn`` level does per turn). A completion that never emits a marker is one phase: the sequence level; so is
    every completion when the batch has no ``block_ids`` (a direct call). Shapes ``[N, T]``.
    """
    phases = batch.get("block_ids") if batch is not None else None
    phases = torch.zeros_like(mask, dtype=torch.long) if phases is None else phases.long().to(log_ratio.device)
    phase_ratio = segment_mean(log_ratio, mask, phases)  # [N, T]
    clipped = clip_fn(phase_ratio, advantages)
    return level_output(advantages, clipped.log_weight, phase_ratio, clipped)
