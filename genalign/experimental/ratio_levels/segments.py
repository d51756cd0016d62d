"""Segment ratio levels whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import (
    RATIO_LEVELS,
    ClipFn,
    LevelOutput,
    action_positions,
    level_output,
    segment_ids_of,
    segment_mean,
)


@RATIO_LEVELS.register(
    "sentence",
    needs=("segment_ids",),
    formula="s_{i,k} = exp(mean_{t∈sentence k} ℓ_it), sentences from the completion text (rollout segment_ids), "
    "clipped per sentence and placed on its actions; the clip form sees the sentence-mean entropy",
    source="[15] SSPO",
    summary="Sentence-level ratio between GRPO's token ratio and GSPO's sequence ratio.",
)
def sentence_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    segment_length: int = 16,
) -> LevelOutput:
    """SSPO [15]: one importance ratio per sentence, ``s_{i,k} = exp(mean_{t ∈ k} ℓ_{i,t})`` (GSPO's length-normalised
    form applied inside each sentence), clipped per sentence; every action of the sentence carries its surrogate.

    Reading chosen: the abstract does not define a sentence; genalign takes the sentences of the completion text,
    the rollout's ``segment_ids`` (registry meta ``needs``: the trainer asks the policy for them, and a family that
    cannot segment its outputs is rejected at config load). Token families end a sentence after a token whose text
    holds a newline or ``.``, ``!``, ``?`` followed by whitespace (:mod:`genalign.policies.lm.segments`). Called
    without ``segment_ids`` in the batch (direct use), consecutive windows of ``segment_length`` actions stand in. With
    ``clip="entropy_adaptive"`` the clip form receives each sentence's mean entropy ("sentence entropy" in the
    abstract), which is SSPO's pairing.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        batch: optional ``segment_ids`` / ``entropy``.
        segment_length: window size (actions) used only when the batch has no ``segment_ids``; >= 1.
    """
    if segment_length < 1:
        raise ValueError(f"segment_length must be >= 1 (actions per sentence window), got {segment_length!r}")
    segments = segment_ids_of(mask, batch, segment_length)  # [N, T]
    sentence = segment_mean(log_ratio, mask, segments)  # [N, T]
    sentence_batch = batch
    if batch.get("entropy") is not None:
        sentence_batch = batch.with_values(entropy=segment_mean(batch["entropy"], mask, segments))
    clipped = clip_fn(sentence, advantages, sentence_batch)
    return level_output(advantages, clipped.log_weight, sentence, clipped)


@RATIO_LEVELS.register(
    "cumulative",
    formula="L_it = Σ_{j≤t} ℓ_ij; ℓ̃ = s_t · clip(L_it / s_t) with s_t = √t (sqrt), t (linear) or 1 (none)",
    source="[271] CTPO",
    summary="Cumulative prefix ratio Π_{j≤t} ρ_j with position-adaptive clipping in log space.",
)
def cumulative_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    position_scaling: Literal["sqrt", "linear", "none"] = "sqrt",
) -> LevelOutput:
    """CTPO [271]: the weight of action ``t`` is the cumulative prefix ratio ``Π_{j≤t} ρ_j = exp(L_t)``, the unbiased
    prefix correction. Position-adaptive clipping: the clip form's log-space bounds are multiplied by ``s_t``
    (implemented as ``s_t · clip(L_t / s_t)``, whose gradient is ``∇L_t`` where unclipped).

    Reading chosen: the abstract says the bounds follow the "natural growth" of the cumulative log-ratio (a sum of
    ``t`` roughly independent terms), i.e. ``s_t = √t`` (default); ``linear`` (``s_t = t``, which clips the prefix
    mean) and ``none`` (fixed bounds) are exposed as the free choice.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        batch: unused.
        position_scaling: ``"sqrt"``, ``"linear"`` or ``"none"``.
    """
    if position_scaling not in ("sqrt", "linear", "none"):
        raise ValueError(f"position_scaling must be 'sqrt', 'linear' or 'none', got {position_scaling!r}")
    cumulative = torch.cumsum(log_ratio * mask, 1)  # [N, T]
    positions = action_positions(mask)  # [N, T]
    scale = {"sqrt": positions.sqrt(), "linear": positions, "none": torch.ones_like(positions)}[position_scaling]
    clipped = clip_fn(cumulative / scale, advantages)
    return level_output(advantages, clipped.log_weight * scale, cumulative, clipped)


@RATIO_LEVELS.register(
    "min_prefix",
    formula="ℓ̃_it = min_{j≤t} ℓ_ij (the smallest ratio of the prefix), clipped per action",
    source="[236] MinPRO",
    summary="Non-cumulative prefix surrogate: the minimum token ratio of the preceding prefix.",
)
def min_prefix_level(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_fn: ClipFn, batch: StepBatch
) -> LevelOutput:
    """MinPRO [236]: action ``t`` is weighted by ``min_{j≤t} ρ_j`` (reading chosen, as the index states: the minimum
    token ratio over the prefix including ``t``), a bounded stand-in for the cumulative prefix ratio; the gradient
    flows to the arg-min action. Clipped per action. Shapes ``[N, T]``."""
    filled = torch.where(mask > 0, log_ratio, torch.inf)  # [N, T]
    prefix_min = torch.cummin(filled, dim=1).values  # [N, T]
    prefix_min = torch.where(torch.isfinite(prefix_min), prefix_min, 0.0)  # rows/positions before any valid action
    clipped = clip_fn(prefix_min, advantages)
    return level_output(advantages, clipped.log_weight, prefix_min, clipped)
